"""Images and audio for Gemma 4: checked, decoded and bounded here, encoded by llama.cpp's mtmd.

`load_media` turns a file (or its bytes) into `Media`: images are decoded with Pillow (PNG,
JPEG, WebP, GIF, BMP), turned upright, and scaled so the long side is at most MAX_SIDE (the
projector resizes further to its own token budget); audio (WAV, MP3, FLAC) is kept as the
file's bytes for mtmd's decoder. Anything else, or anything too large, is refused with one
line before llama.cpp sees it.

`Projector` owns the mtmd context of an mmproj file. A media item becomes a run of positions
in the prompt: its text markers (e.g. `<|image>` ... `<image|>`) as ordinary tokens and the
encoded item as `n_pos` copies of a negative pseudo-token id derived from its content hash, so
the engine's prefix reuse can compare prompts that carry media. Encoded embeddings are cached
by content: a follow-up question about the same picture does not encode it again.
"""

from __future__ import annotations

import ctypes
import hashlib
import io
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import ModelFileError, TandemError

MAX_MEDIA_BYTES = 64 * 2**20  # a file larger than this is refused unread
MAX_IMAGE_PIXELS = 64_000_000  # decoding more would take gigabytes (a 20000x20000 PNG is 400 MP)
MAX_SIDE = 2048  # images are scaled down to this before mtmd (Gemma 4 uses at most 1120 tokens)
CACHE_ITEMS = 16  # encoded media kept for prefix reuse across turns
IMAGE_FORMATS = ("PNG", "JPEG", "WEBP", "GIF", "BMP")
GEMMA4_PROJECTORS = {"gemma4v": "vision", "gemma4uv": "vision", "gemma4a": "audio", "gemma4ua": "audio"}


class MediaError(TandemError):
    """A picture or sound that cannot be used, in words."""


class ProjectorError(ModelFileError):
    """An mmproj file that cannot be used: the model itself may still load without it."""


@dataclass(frozen=True)
class Media:
    kind: str  # "image" or "audio"
    data: bytes  # image: RGB pixels, ny rows of nx; audio: the file's bytes
    digest: str  # SHA-256 of the original file: the same file is the same media
    nx: int = 0
    ny: int = 0
    name: str = ""


def media_kind(raw: bytes) -> str:
    """"audio" for WAV, MP3 and FLAC files (by their first bytes), else "image" (to be checked)."""
    return "audio" if _audio_kind(raw) else "image"


def _audio_kind(raw: bytes) -> str | None:
    if raw[:4] == b"RIFF" and raw[8:12] == b"WAVE":
        return "wav"
    if raw[:4] == b"fLaC":
        return "flac"
    if raw[:3] == b"ID3" or (len(raw) > 1 and raw[0] == 0xFF and raw[1] & 0xE0 == 0xE0):
        return "mp3"
    return None


def load_media(source: bytes | str | Path, name: str = "") -> Media:
    """Check and decode a picture or a sound (see the module doc)."""
    if isinstance(source, (str, Path)):
        p = Path(source)
        name = name or p.name
        try:
            if p.stat().st_size > MAX_MEDIA_BYTES:
                raise MediaError(f"{name}: larger than {MAX_MEDIA_BYTES // 2**20} MB")
            raw = p.read_bytes()
        except OSError as e:
            raise MediaError(f"{name}: cannot be read ({e.strerror or e})") from None
    else:
        raw = bytes(source)
        name = name or "pasted media"
        if len(raw) > MAX_MEDIA_BYTES:
            raise MediaError(f"{name}: larger than {MAX_MEDIA_BYTES // 2**20} MB")
    digest = hashlib.sha256(raw).hexdigest()
    if _audio_kind(raw):
        return Media("audio", raw, digest, name=name)
    pixels, nx, ny = _decode_image(raw, name)
    return Media("image", pixels, digest, nx, ny, name)


def picture_pixels(raw: bytes) -> int:
    """A picture's pixels as its header says (nothing decoded); 0 for anything else (a sound,
    or what load_media will refuse)."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(raw)) as img:
            w, h = img.size
    except Exception:
        return 0
    return w * h


def _decode_image(raw: bytes, name: str) -> tuple[bytes, int, int]:
    from PIL import Image, ImageOps, UnidentifiedImageError

    try:
        img = Image.open(io.BytesIO(raw))  # reads the header only
    except Image.DecompressionBombError:  # Pillow's own guard, far above ours
        raise MediaError(f"{name}: the picture is too large (over {MAX_IMAGE_PIXELS // 1_000_000} megapixels); "
                         "scale it down first") from None
    except (UnidentifiedImageError, OSError, ValueError):
        raise MediaError(f"{name}: not a picture or sound Tandem can read (PNG, JPEG, WebP, GIF, BMP; "
                         "WAV, MP3, FLAC)") from None
    if img.format not in IMAGE_FORMATS:
        raise MediaError(f"{name}: {img.format} pictures are not supported (PNG, JPEG, WebP, GIF, BMP)")
    w, h = img.size
    if w * h > MAX_IMAGE_PIXELS:
        raise MediaError(f"{name}: the picture is too large ({w}x{h} pixels, over {MAX_IMAGE_PIXELS // 1_000_000} "
                         "megapixels); scale it down first")
    if w < 1 or h < 1:
        raise MediaError(f"{name}: the picture is empty")
    try:
        img.draft("RGB", (MAX_SIDE, MAX_SIDE))  # JPEG: decode at a reduced scale directly
        img = ImageOps.exif_transpose(img).convert("RGB")
        img.thumbnail((MAX_SIDE, MAX_SIDE))
    except (OSError, ValueError, SyntaxError) as e:  # truncated or damaged pixel data
        raise MediaError(f"{name}: the picture is damaged ({e})") from None
    return img.tobytes(), img.width, img.height


# ---- the projector ----------------------------------------------------------------------
@dataclass
class ProjectorInfo:
    path: Path
    kinds: dict[str, str] = field(default_factory=dict)  # "vision"/"audio" -> projector type
    n_embd_out: dict[str, int] = field(default_factory=dict)  # per modality: the width it writes


def read_projector_info(path: str | Path) -> ProjectorInfo:
    """What an mmproj file is, from its header, before llama.cpp reads it."""
    from ..models.gguf_info import read_gguf_metadata

    try:
        meta = read_gguf_metadata(path)
    except ModelFileError as e:
        raise ProjectorError(str(e)) from None
    p = Path(path)
    if meta.get("general.architecture") != "clip":
        raise ProjectorError(f"{p.name}: not a vision/audio projector (architecture "
                             f"{meta.get('general.architecture')!r}, expected 'clip')")
    info = ProjectorInfo(p)
    common = meta.get("clip.projector_type")
    for modality, has_key in (("vision", "clip.has_vision_encoder"), ("audio", "clip.has_audio_encoder")):
        if meta.get(has_key) is not True:
            continue
        ptype = meta.get(f"clip.{modality}.projector_type") or common
        if GEMMA4_PROJECTORS.get(ptype) != modality:
            raise ProjectorError(f"{p.name}: a {ptype!r} projector, not Gemma 4's (gemma4v/gemma4a)")
        info.kinds[modality] = ptype
        dim = meta.get(f"clip.{modality}.projection_dim")
        if isinstance(dim, int):
            info.n_embd_out[modality] = dim
    if not info.kinds:
        raise ProjectorError(f"{p.name}: has neither a vision nor an audio encoder")
    return info


@dataclass
class MediaRun:
    """One encoded item in the prompt: `n_pos` positions of pseudo-token `pid`."""

    pid: int
    kind: str
    chunk: int  # an owned mtmd_input_chunk
    n_pos: int
    n_tokens: int
    embd: np.ndarray | None = None  # [n_tokens * n_embd] floats, once encoded


class Projector:
    def __init__(self, path: str | Path, runtime, n_threads: int, use_gpu: bool = False):
        import llama_cpp.mtmd_cpp as mtmd

        self.mtmd = mtmd
        self.info = read_projector_info(path)
        n_embd = runtime.n_embd
        for modality, dim in self.info.n_embd_out.items():
            if dim != n_embd:
                raise ProjectorError(f"{self.info.path.name}: writes {modality} embeddings of width {dim}, but the "
                                     f"model is {n_embd} wide; it belongs to another Gemma 4 size")
        params = mtmd.mtmd_context_params_default()
        params.use_gpu = use_gpu
        params.n_threads = n_threads
        params.print_timings = False
        params.warmup = False
        params.flash_attn_type = 1 if runtime.options.flash_attn else 0
        self.ctx = mtmd.mtmd_init_from_file(str(self.info.path).encode(), runtime.target_model, params)
        if not self.ctx:
            raise ProjectorError(f"{self.info.path.name}: llama.cpp could not load this projector for "
                                 f"{runtime.target_info.path.name}")
        self.vision = bool(mtmd.mtmd_support_vision(self.ctx))
        self.audio = bool(mtmd.mtmd_support_audio(self.ctx))
        self.n_embd = n_embd
        self._marker = mtmd.mtmd_default_marker()
        self._runs: OrderedDict[str, tuple[list, MediaRun]] = OrderedDict()

    def close(self) -> None:
        for _, run in self._runs.values():
            self.mtmd.mtmd_input_chunk_free(run.chunk)
        self._runs.clear()
        if self.ctx:
            self.mtmd.mtmd_free(self.ctx)
            self.ctx = None

    def supports(self, media: Media) -> str | None:
        """None if this projector reads the media, else why not."""
        if media.kind == "image" and not self.vision:
            return "this model's projector reads no pictures"
        if media.kind == "audio" and not self.audio:
            return "this model reads no audio (Gemma 4 E2B and E4B do)"
        return None

    def tokens(self, media: Media) -> tuple[list, MediaRun]:
        """The prompt positions of one item: marker tokens (ints) and its run (cached)."""
        hit = self._runs.get(media.digest)
        if hit is not None:
            self._runs.move_to_end(media.digest)
            return hit
        why = self.supports(media)
        if why:
            raise MediaError(f"{media.name}: {why}")
        m = self.mtmd
        if media.kind == "image":
            buf = (ctypes.c_ubyte * len(media.data)).from_buffer_copy(media.data)
            bmp = m.mtmd_bitmap_init(media.nx, media.ny, buf)
        else:
            buf = (ctypes.c_uint8 * len(media.data)).from_buffer_copy(media.data)
            wrapped = m.mtmd_helper_bitmap_init_from_buf_wrapper(self.ctx, buf, len(media.data), False,
                                                                  m.mtmd_helper_init_opt_default())
            bmp = wrapped.bitmap  # miniaudio decodes WAV, MP3 and FLAC
        if not bmp:
            raise MediaError(f"{media.name}: the {media.kind} could not be decoded")
        text = self._marker  # keep the bytes alive while mtmd reads them
        inp = m.mtmd_input_text()
        inp.text, inp.text_len, inp.add_special, inp.parse_special = text, len(text), False, True
        chunks = m.mtmd_input_chunks_init()
        try:
            arr = (ctypes.c_void_p * 1)(bmp)
            if m.mtmd_tokenize(self.ctx, chunks, ctypes.byref(inp), arr, 1) != 0:
                raise MediaError(f"{media.name}: the {media.kind} could not be prepared for the model")
            out, run = [], None
            pid = -1 - int(media.digest[:7], 16)  # negative: never a real token id
            for i in range(m.mtmd_input_chunks_size(chunks)):
                c = m.mtmd_input_chunks_get(chunks, i)
                if m.mtmd_input_chunk_get_type(c) == 0:  # text: the markers around the media
                    n = ctypes.c_size_t()
                    ptr = m.mtmd_input_chunk_get_tokens_text(c, ctypes.byref(n))
                    out += [ptr[j] for j in range(n.value)]
                else:
                    run = MediaRun(pid, media.kind, m.mtmd_input_chunk_copy(c),
                                   int(m.mtmd_input_chunk_get_n_pos(c)), int(m.mtmd_input_chunk_get_n_tokens(c)))
                    out += [pid] * run.n_pos
        finally:
            m.mtmd_input_chunks_free(chunks)
            m.mtmd_bitmap_free(bmp)
        if run is None:
            raise MediaError(f"{media.name}: the model made nothing of this {media.kind}")
        self._runs[media.digest] = (out, run)
        while len(self._runs) > CACHE_ITEMS:
            _, (_, old) = self._runs.popitem(last=False)
            self.mtmd.mtmd_input_chunk_free(old.chunk)
        return out, run

    def run_for(self, pid: int) -> MediaRun | None:
        return next((r for _, r in self._runs.values() if r.pid == pid), None)

    def decode(self, run: MediaRun, lctx, n_past: int, n_batch: int, seq: int = 0) -> float:
        """Encode (once) and decode one run into sequence `seq` of the target's cache at
        n_past; returns the seconds spent encoding."""
        m = self.mtmd
        spent = 0.0
        if run.embd is None:
            t = time.perf_counter()
            if m.mtmd_encode_chunk(self.ctx, run.chunk) != 0:
                raise MediaError(f"encoding the {run.kind} failed")
            ptr = m.mtmd_get_output_embd(self.ctx)
            run.embd = np.ctypeslib.as_array(ptr, shape=(run.n_tokens * self.n_embd,)).copy()
            spent = time.perf_counter() - t
        new_past = ctypes.c_int32()
        ret = m.mtmd_helper_decode_image_chunk(
            self.ctx, lctx, run.chunk, run.embd.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), n_past, seq,
            n_batch, ctypes.byref(new_past), m.mtmd_helper_post_decode_callback(), None)
        if ret != 0:
            raise MediaError(f"decoding the {run.kind} into the model failed ({ret})")
        return spent
