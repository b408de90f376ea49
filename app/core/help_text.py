"""The words of Help: How MTP works (also the toolbar's ?) and About."""

from __future__ import annotations

MTP_EXPLAINED = (
    "<h3>How MTP works</h3>"
    "<p>Writing each word (token) normally takes one full pass through the model, and each pass "
    "reads all of its weights from memory. MTP adds a tiny <b>drafter</b> that guesses the next few "
    "tokens cheaply. The model then checks all the guesses in <b>one</b> pass: it keeps the guesses "
    "it agrees with, adds one token of its own, and throws the rest away.</p>"
    "<p><b>The answer is exactly the same</b> as without MTP: every token is still the model's own "
    "choice. Only the speed changes. (With a temperature above 0 answers vary from run to run, with "
    "MTP as without; MTP keeps the model's own odds for every token.)</p>"
    "<p>It pays off when the model accepts many guesses (code, lists, repetitive text) and when "
    "checking several tokens costs little more than one — true on GPUs, much less so on small CPUs. "
    "With draft length <b>auto</b>, Tandem measures both while it writes, drafts as far as pays, and "
    "pauses drafting where it would be slower. <b>Compare</b> shows the difference on your own prompt.</p>"
    "<p>In the stats: <i>accepted</i> is the share of guesses kept, <i>tok/step</i> the tokens "
    "produced per model pass.</p>")


def about() -> str:
    """Help → About: versions, the llama.cpp build, GPU offload, where the log is."""
    import engine
    from engine.local.llama import supports_gpu_offload, system_info, version

    from .diagnostics import log_path

    return (f"<h3>Tandem {engine.__version__}</h3>"
            f"<p>Local Gemma 4 chat with MTP speculative decoding.</p>"
            f"<p>llama-cpp-python {version()} · GPU offload: "
            f"{'yes' if supports_gpu_offload() else 'no (CPU build)'}<br>"
            f"<small>{system_info()}</small></p><p>Log: {log_path()}</p>")


def acceptance_details(s: dict) -> str:
    """A reply's Details: acceptance per draft position and what auto did."""
    import html

    values, labels = position_bars(s)
    rows = "".join(f"<tr><td>draft {n}</td><td align=right>{v * 100:.0f} %</td></tr>" for n, v in zip(labels, values))
    rate = s.get("acceptance_rate")
    acceptance = f": {rate * 100:.0f} % acceptance" if rate is not None else ""
    n = s.get("undrafted_steps", 0)
    auto = (f" Draft length auto: {s.get('mean_draft_length') or 0:.2f} tokens per step on average, "
            f"{n} step{'s' * (n != 1)} without drafting (drafts were not paying off there)."
            if s.get("draft_max") == "auto" else "")
    head = f"<p>The drafter's head: {html.escape(s['draft_head'])}.</p>" if s.get("draft_head") else ""
    return (f"<p>{html.escape(str(s.get('footer', '')))}</p><table cellpadding=3>{rows}</table>"
            f"<p>{s.get('accepted_tokens', 0)} of {s.get('draft_tokens', 0)} drafted tokens accepted "
            f"in {s.get('steps', 0)} verify steps{acceptance}.{auto}</p>{head}")


def mtp_limit(ceiling: float, costs_ms: tuple[float, float, float]) -> str:
    """The banner where measurements say MTP cannot beat plain decoding on this machine."""
    decode, verify, draft = costs_ms
    return (f"On this machine MTP is unlikely to be faster than plain decoding for this model: one decode takes "
            f"{decode:.1f} ms, a verify of 2 tokens {verify:.1f} ms and a draft step {draft:.1f} ms, so even "
            f"if every draft were accepted it would reach about {ceiling:.2f}x. With k auto Tandem keeps "
            "drafting paused (it still tries now and then); switch MTP off to skip the drafter entirely.")


def mtp_switch_tip(info) -> str:
    """The MTP switch's tooltip for the loaded model (an app.core.chat_types.ModelInfo, or None)."""
    if info is not None and info.remote and not info.can_switch_mtp:
        return (f"{info.engine} decides about drafting when it starts, not per request"
                + (f": {info.mtp_reason}" if info.mtp_reason else ": it drafts"))
    lookup = ("Lookup: where the answer repeats text already in the chat (a file being edited, a quoted "
              "passage), that text is proposed and the model checks it all in one pass. ")
    if info is not None and not info.can_draft:
        return f"MTP unavailable: {info.mtp_reason}"
    if info is not None and "lookup" in info.sources and not info.has_mtp:
        return lookup + f"Same answer, often faster. (No MTP: {info.mtp_reason}.)"
    return ("MTP: a small drafter guesses the next few words and the model checks them all in one pass. "
            + (lookup if info is not None and "lookup" in info.sources else "")
            + "Same answer, often faster. Help → How MTP works")


COMPARE_NEEDS_BASELINE = ("Compare needs a baseline server: the same model served without a drafter (servers "
                          "cannot switch drafting per request). Add its address to this connection in "
                          "Settings → Connections.")


DRAFT_SOURCES = {"mtp": "MTP", "lookup": "Lookup", "hybrid": "MTP + lookup"}


def draft_source(mode: str | None) -> str:
    """What drafted a run, by its stats' mode, in the one name every surface uses (a server's
    drafting, "remote", is its drafter's: MTP)."""
    return DRAFT_SOURCES.get(mode or "", "MTP")


def sentence(text: str) -> str:
    """A message that starts with a capital: engine and server errors are written to be
    embedded in a sentence ("the conversation is ..."). A first word that is a name (a file,
    a path, a field such as max_tokens) keeps its spelling."""
    first = text.split(" ", 1)[0].rstrip(":,;")
    return text[:1].upper() + text[1:] if first.isalpha() and first.islower() else text


MAX_BARS = 8  # draft positions shown one by one; lookup drafts run to dozens, which share the last bar


def position_bars(s: dict) -> tuple[list[float], list[str]]:
    """Acceptance at each draft position, and the bars' labels: positions past MAX_BARS are
    counted together in a last "9+" bar (accepted / drafted over them, so the bars still
    average to the overall acceptance)."""
    drafted, accepted = s.get("drafted_at") or [], s.get("accepted_at") or []
    if not drafted:  # stats saved before the counts were kept: the ratios, first positions only
        values = (s.get("per_position_acceptance") or [])[:MAX_BARS]
        return values, [str(i) for i in range(1, len(values) + 1)]
    if len(drafted) > MAX_BARS:
        drafted = drafted[:MAX_BARS] + [sum(drafted[MAX_BARS:])]
        accepted = accepted[:MAX_BARS] + [sum(accepted[MAX_BARS:])]
    labels = [str(i) for i in range(1, len(drafted) + 1)]
    if len(labels) > MAX_BARS:
        labels[-1] = f"{MAX_BARS + 1}+"
    return [a / d if d else 0.0 for a, d in zip(accepted, drafted)], labels


# fewer prompt tokens than this read again: a rate would mislead ("53 tok/s" for the one token
# a regenerate decodes again reads as a very slow prefill); the reuse is shown instead
FEW_READ = 32


def prefill_text(s: dict) -> str:
    """The strip's prefill field: how fast the prompt was read, and how much of it came from the
    cache (a conversation going on, a regenerate, an edit, a chat switched back to)."""
    reused, total = s.get("reused_tokens") or 0, s.get("prompt_tokens") or 0
    read = total - reused
    if reused and read < FEW_READ:
        return f"{reused:,} of {total:,} cached"
    rate = s.get("prefill_tps")
    text = f"{rate:.0f} tok/s" if rate else "–"
    return text + (f", {reused:,} cached" if reused else "")
