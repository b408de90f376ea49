"""`tandem`'s arguments: the top-level parser and one function per command's options.
Bad arguments give one line on stderr and exit code 2 (`_Parser`)."""

from __future__ import annotations

import argparse
import sys

from ..bench.edit_suite import SUITE_CTX
from ..generation import AUTO, DEFAULT_PARALLEL, MAX_DRAFT, SPECS

EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not usage + message
        sys.stderr.write(f"tandem: error: {message} (see {self.prog} --help)\n")
        raise SystemExit(EXIT_USAGE)


class _Version(argparse.Action):
    """`tandem --version`: Tandem's version, llama-cpp-python's, and whether its build offloads to a GPU."""

    def __init__(self, option_strings, dest, **kw):
        super().__init__(option_strings, dest, nargs=0, **{k: v for k, v in kw.items() if k == "help"})

    def __call__(self, parser, namespace, values, option_string=None):
        from .. import __version__
        from ..local.llama import supports_gpu_offload, version

        print(f"tandem {__version__} · llama-cpp-python {version()} · GPU offload: "
              + ("yes" if supports_gpu_offload() else "no (CPU build)"))
        parser.exit()


def _positive(kind=int):
    def conv(s):
        try:
            v = kind(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number > 0, got {s!r}") from None
        if v <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {s}")
        return v
    return conv


def _layers(s):
    """--gpu-layers: 'auto', 'all' (-1) or a count, as llama.cpp's -ngl spells them."""
    if s in (AUTO, "all"):
        return AUTO if s == AUTO else -1
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be 'auto', 'all', -1 or a count >= 0, got {s!r}") from None
    if v < -1:
        raise argparse.ArgumentTypeError(f"must be 'auto', 'all', -1 or a count >= 0, got {s}")
    return v


def _port(s):
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a port number, got {s}") from None
    if not 1 <= v <= 65535:
        raise argparse.ArgumentTypeError(f"must be between 1 and 65535, got {s}")
    return v


def _draft_length(s):
    """AUTO (chosen every step) or a fixed number of drafted tokens, 1..MAX_DRAFT."""
    from ..generation import check_draft_length

    try:
        return check_draft_length(s if s == AUTO else int(s))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be '{AUTO}' or a number from 1 to {MAX_DRAFT}, got {s}") from None


def _add_load_args(p, remote: bool = True):
    """The model options; `remote`: also --server and its --api-key (generate, bench)."""
    p.add_argument("--model", "-m", help="target GGUF (Gemma 4 for MTP; any llama.cpp model for baseline)"
                   + ("; with --server, the served model's name (optional when the server serves one)" if remote
                      else ""))
    if remote:
        p.add_argument("--server", metavar="URL", help="decode on an OpenAI-compatible server (llama-server, "
                       "vLLM, SGLang, Ollama), e.g. http://127.0.0.1:8080/v1; Tandem streams and measures")
        p.add_argument("--api-key", help="the server's API key (default: $TANDEM_API_KEY)")
    else:
        p.set_defaults(server=None)
    p.add_argument("--drafter", "-d", help="gemma-4 assistant (MTP drafter) GGUF")
    p.add_argument("--ctx", type=_positive(), default=None,
                   help="context size in tokens, at most the model's trained length (default: 4096 for each "
                        "sequence; tandem serve: 32768, or 4096 for each --parallel request if more, less where "
                        "memory is short but never below 4096, shared by the requests decoding together)")
    p.add_argument("--threads", type=int, default=0, help="CPU threads (default: physical cores)")
    p.add_argument("--gpu-layers", type=_layers, default=AUTO,
                   help="target layers on the GPU: a count, 'all' (or -1), or 'auto' (default: every layer "
                        "where the memory plan fits on the GPU, else as many as fit)")
    p.add_argument("--drafter-gpu-layers", type=_layers, default=AUTO,
                   help="drafter layers on the GPU: a count, 'all' (or -1), or 'auto' (the default)")
    p.add_argument("--draft-head", choices=["auto", "full", "clustered"], default="auto",
                   help="the drafter's head: 'clustered' scores cluster centroids first and exact logits "
                        "only for the best clusters' tokens (E2B and E4B assistants carry them), 'full' "
                        "every token; 'auto' (the default): clustered where the drafter has it")
    p.add_argument("--no-flash-attn", action="store_true", help="disable flash attention (both contexts)")
    p.add_argument("--verbose", action="store_true", help="show llama.cpp's log")


def _add_sampling_args(p):
    from ..sampling import SamplingParams

    d = SamplingParams()  # the defaults, as the app's
    p.add_argument("--temperature", "-t", type=float, default=d.temperature, help="0 = greedy (default)")
    p.add_argument("--top-k", type=int, default=d.top_k)
    p.add_argument("--top-p", type=float, default=d.top_p)
    p.add_argument("--min-p", type=float, default=d.min_p)
    p.add_argument("--repeat-penalty", type=float, default=d.repeat_penalty)
    p.add_argument("--seed", type=int, default=None)


def _add_generate(sub) -> None:
    """`tandem generate`: one prompt, its reply streamed."""
    g = sub.add_parser("generate", help="generate a reply to one prompt")
    _add_load_args(g)
    _add_sampling_args(g)
    g.add_argument("--no-mtp", action="store_true", help="baseline decoding even with a drafter (as --spec none)")
    g.add_argument("--spec", choices=SPECS, default=AUTO,
                   help="where drafts come from: mtp (the drafter), lookup (text already in the prompt or "
                        "reply: any model), none (baseline), auto (every source the model has; default)")
    g.add_argument("--draft-max", type=_draft_length, default=AUTO,
                   help=f"tokens drafted per step (1-{MAX_DRAFT}; caps lookup's proposals too), or 'auto' to "
                        "choose every step from measured costs and acceptance (default auto)")
    g.add_argument("--max-tokens", type=_positive(), default=256)
    g.add_argument("--raw", action="store_true", help="no chat template: complete the text as is")
    g.add_argument("--system", help="system prompt")
    g.add_argument("--thinking", action="store_true", help="enable Gemma 4 thinking mode")
    g.add_argument("--json", action="store_true", help="print one JSON object instead of streaming text")
    g.add_argument("--json-schema", metavar="FILE", help="the reply is JSON that matches this JSON schema")
    g.add_argument("--grammar", metavar="FILE", help="the reply follows this GBNF grammar (llama.cpp's syntax)")
    g.add_argument("--image", action="append", default=[], metavar="PATH",
                   help="a picture for the model to read (PNG, JPEG, WebP, GIF, BMP); repeat for more")
    g.add_argument("--audio", action="append", default=[], metavar="PATH",
                   help="a sound for the model to hear (WAV, MP3, FLAC; Gemma 4 E2B and E4B)")
    g.add_argument("--mmproj", metavar="GGUF", help="the vision/audio projector (default: the mmproj-*.gguf "
                   "next to the model)")
    g.add_argument("prompt")


def _add_bench(sub) -> None:
    """`tandem bench`: baseline and drafting side by side, locally or on servers."""
    b = sub.add_parser("bench", help="baseline vs drafting (MTP, lookup) side by side on the same prompts")
    _add_load_args(b)
    b.add_argument("--prompts", help="JSONL file of prompts (default: the built-in set)")
    b.add_argument("--max-tokens", type=_positive(), default=128)
    b.add_argument("--draft-max", type=_draft_length, nargs="+", default=[AUTO, 1, 2, 3, 4],
                   help="draft lengths to compare with baseline, 'auto' among them (default auto 1 2 3 4)")
    b.add_argument("--spec", choices=SPECS, nargs="+", default=None,
                   help="draft sources to compare with baseline (default: mtp if a drafter is loaded, lookup, "
                        "and auto, which chooses between them every step)")
    b.add_argument("--suite", choices=["default", "edits"], default="default",
                   help="built-in prompts: a mix (default), or code edits and prose (what lookup speeds up; "
                        f"its files need a context of at least {SUITE_CTX} tokens, which it takes)")
    b.add_argument("--json", metavar="OUT", help="also write the results as JSON to OUT")
    b.add_argument("--json-schema", metavar="FILE", help="also run every prompt constrained to this JSON schema, "
                   "and compare (what constrained decoding costs)")
    b.add_argument("--grammar", help=argparse.SUPPRESS)  # _constraint reads both
    b.add_argument("--baseline-server", metavar="URL", help="with --server: the same model served without a "
                   "drafter, the baseline to compare with")
    b.add_argument("--concurrency", type=_positive(), nargs="+", metavar="N",
                   help="with --server: N clients at once (e.g. 1 2 4 8): aggregate tok/s and the slowest "
                        "client's time, drafting on and (tandem serve, or --baseline-server) off")


def _add_serve(sub) -> None:
    """`tandem serve`: the local API."""
    sv = sub.add_parser("serve", help="serve the model as a local OpenAI-compatible API (for editors)")
    _add_load_args(sv, remote=False)
    sv.add_argument("--api-key", help="the key clients must send (Authorization: Bearer KEY); default: none")
    sv.add_argument("--host", nargs="+", default=["127.0.0.1"], metavar="HOST", help="addresses to listen on "
                    "(default 127.0.0.1: this computer only; any other needs --api-key)")
    sv.add_argument("--port", type=_port, default=8080)
    sv.add_argument("--draft-max", type=_draft_length, default=AUTO,
                    help="draft length for requests that do not choose (default auto)")
    sv.add_argument("--cors", metavar="ORIGIN", nargs="+", help="allow browser pages from these origins: exact "
                    "origins, * for any, localhost for any page of this computer (default: none)")
    sv.add_argument("--parallel", type=_positive(), default=DEFAULT_PARALLEL,
                    help="requests decoded together, in one batch per step (default 4)")
    sv.add_argument("--queue", type=_positive(), default=4, help="requests that may wait beyond those (default 4)")
    sv.add_argument("--mmproj", metavar="GGUF", help="the vision/audio projector, so requests may carry pictures "
                    "(as llama-server's --mmproj; default: none)")
    sv.add_argument("--cache-ram", type=int, default=-1, metavar="MIB",
                    help="memory for conversations out of the slots, so they come back without being read again "
                         "(default -1: a quarter of the memory available, at most 8192; 0: none)")
    sv.add_argument("--no-disk-cache", action="store_true",
                    help="keep no conversations on disk (by default they are, so a restart reads nothing again)")
    sv.add_argument("--name", nargs="+", metavar="NAME", help="the model name clients see (default: the file's "
                    "name); more names: its aliases, which /v1/models lists too")
    sv.add_argument("--tags", nargs="+", default=[], metavar="TAG", help="labels /v1/models lists for the model")


def _add_models(sub) -> None:
    """`tandem models …`: the catalog, downloads, imports."""
    mm = sub.add_parser("models", help="list, download, import or verify Gemma 4 models, or cluster a drafter's head")
    msub = mm.add_subparsers(dest="models_command", parser_class=_Parser, required=True)
    msub.add_parser("list", help="the catalog, what fits this machine, and your models")
    d = msub.add_parser("download", help="download a Gemma 4 model and its MTP drafter")
    d.add_argument("name", help="a name from `tandem models list` (e.g. gemma-4-e4b), or a repository "
                                "as owner/name[:QUANT] (e.g. ggml-org/gemma-4-E4B-it-GGUF:Q4_K_M)")
    d.add_argument("--quant", default="Q4_K_M", help="quantization (default Q4_K_M)")
    d.add_argument("--dir", help="download into this folder instead of the Hugging Face cache")
    d.add_argument("--no-vision", action="store_true", help="leave out the picture reader (mmproj projector)")
    i = msub.add_parser("import", help="add GGUF files from disk (finds the matching drafter)")
    i.add_argument("path", help="a target GGUF, or a folder of them")
    msub.add_parser("verify", help="check that your models are present and pair")
    c = msub.add_parser("cluster", help="give a drafter without cluster centroids Tandem's own clustered head")
    c.add_argument("drafter", help="a drafter GGUF (an E2B/E4B assistant from the Hub has no centroids)")
    c.add_argument("--clusters", type=int, default=0, help="clusters of the vocabulary, dividing it evenly "
                   "(default: 128 tokens each, as the published assistants: 2048 of 262,144)")
    c.add_argument("--top-k", type=int, default=32, help="clusters scored exactly at each draft step "
                   "(default 32, at most all of them)")
    c.add_argument("--out", help="write it here (default: Tandem's data folder, where --draft-head auto finds it)")


def _add_make_test_models(sub) -> None:
    """`tandem make-test-models`: synthetic Gemma 4 GGUFs."""
    m = sub.add_parser("make-test-models", help="write a synthetic Gemma 4 target + MTP drafter")
    m.add_argument("outdir")
    m.add_argument("--size", choices=["tiny", "e2b", "e4b", "12b", "26b-a4b", "31b"], default="tiny",
                   help="tiny: a toy; e2b ... 31b: that Gemma 4 size's structure (layers, window, heads, "
                        "KV sharing, per-layer embeddings, 26b-a4b's 128 experts), narrower (default tiny)")
    m.add_argument("--agreement", type=float, default=1.0, help="how often the drafter agrees, 0..1")
    m.add_argument("--vocab", choices=["synthetic", "gemma4"],
                   help="synthetic: a small character-level vocabulary (tiny's default); gemma4: Gemma 4's real "
                        "tokenizer, from the pinned llama-cpp-python sdist (the default of every size but tiny). Either carries "
                        "Gemma 4's real chat template (tools, thinking)")


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="tandem", description="Tandem: Gemma 4 with MTP speculative decoding. With no command, "
                 "opens the desktop window (with --model/--drafter: that pair).",
                 epilog="`tandem COMMAND --help` tells more about each command.")
    ap.add_argument("-V", "--version", action=_Version, help="the version, the llama.cpp build and GPU offload")
    ap.add_argument("--model", "-m", metavar="GGUF", help="the window: load this target GGUF")
    ap.add_argument("--drafter", "-d", metavar="GGUF", help="the window: its MTP drafter GGUF")
    ap.add_argument("--smoke-test", metavar="PROMPT", help=argparse.SUPPRESS)  # bundle checks
    sub = ap.add_subparsers(dest="command", parser_class=_Parser, title="commands", metavar="COMMAND")
    _add_generate(sub)
    _add_bench(sub)
    _add_serve(sub)
    _add_models(sub)
    _add_make_test_models(sub)
    return ap
