"""The words of Help: How MTP works (also the toolbar's ?) and About."""

from __future__ import annotations

MTP_EXPLAINED = (
    "<h3>How MTP works</h3>"
    "<p>Writing each word (token) normally takes one full pass through the model, and each pass "
    "reads all of its weights from memory. MTP adds a tiny <b>drafter</b> that guesses the next few "
    "tokens cheaply. The model then checks all the guesses in <b>one</b> pass: it keeps the guesses "
    "it agrees with, adds one token of its own, and throws the rest away.</p>"
    "<p><b>The answer is exactly the same</b> as without MTP: every token is still the model's own "
    "choice. Only the speed changes.</p>"
    "<p>It pays off when the model accepts many guesses (code, lists, repetitive text) and when "
    "checking several tokens costs little more than one — true on GPUs, much less so on small CPUs. "
    "With draft length <b>auto</b>, Tandem measures both while it writes, drafts as far as pays, and "
    "pauses drafting where it would be slower. <b>Compare</b> shows the difference on your own prompt.</p>"
    "<p>In the stats: <i>accepted</i> is the share of guesses kept, <i>tok/step</i> the tokens "
    "produced per model pass.</p>")


def about() -> str:
    """Help → About: versions, the llama.cpp build, GPU offload, where the log is."""
    import engine
    from engine.llama import supports_gpu_offload, system_info, version

    from .diagnostics import log_path

    return (f"<h3>Tandem {engine.__version__}</h3>"
            f"<p>Local Gemma 4 chat with MTP speculative decoding.</p>"
            f"<p>llama-cpp-python {version()} · GPU offload: "
            f"{'yes' if supports_gpu_offload() else 'no (CPU build)'}<br>"
            f"<small>{system_info()}</small></p><p>Log: {log_path()}</p>")
