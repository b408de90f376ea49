"""Statistics the distribution tests share."""

from __future__ import annotations

import math
from collections import Counter


def chi2_pvalue(a: Counter, b: Counter, min_count: int = 10) -> float:
    """Two-sample chi-square homogeneity test; rare categories are pooled."""
    keys = [k for k in set(a) | set(b) if a[k] + b[k] >= min_count]
    rest_a = sum(a.values()) - sum(a[k] for k in keys)
    rest_b = sum(b.values()) - sum(b[k] for k in keys)
    rows = [(a[k], b[k]) for k in keys]
    if rest_a + rest_b > 0:
        rows.append((rest_a, rest_b))
    na, nb = sum(a.values()), sum(b.values())
    stat = 0.0
    for x, y in rows:
        tot = x + y
        ea, eb = tot * na / (na + nb), tot * nb / (na + nb)
        stat += (x - ea) ** 2 / ea + (y - eb) ** 2 / eb
    df = len(rows) - 1
    if df <= 0:
        return 1.0
    # Wilson-Hilferty: (X/df)^(1/3) is close to normal
    z = ((stat / df) ** (1 / 3) - (1 - 2 / (9 * df))) / math.sqrt(2 / (9 * df))
    return 0.5 * math.erfc(z / math.sqrt(2))
