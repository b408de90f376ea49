"""Pictures in the prompt through llama.cpp's real mtmd path, with a synthetic gemma4v projector
(written by engine.testmodels.write_projector): MTP after an image equals baseline, prefix reuse
keeps the encoded image, and bad projectors and bad media get one clear line."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from engine.local.engine import Engine, GenerationConfig
from engine.errors import ModelFileError
from engine.local.media import MediaError, load_media
from engine.testmodels import write_projector

from ..support.media import png, tone


@pytest.fixture(scope="module")
def vision(tiny):
    mmproj = tiny["target"].parent / "mmproj-tiny.gguf"
    assert mmproj.exists()  # make_test_models writes it next to the pair
    e = Engine.load(tiny["target"], tiny[0.7], mmproj=mmproj)
    yield e
    e.close()


def tiny_target(engine):
    return engine.rt.target_info.path


def ask(text, *images):
    return [{"role": "user", "content": text, "media": [load_media(i, f"img{n}.png") for n, i in enumerate(images)]}]


def test_the_memory_plan_counts_the_projector_as_clip_loads_it(vision):
    planned, allocated = vision.memory
    assert allocated.projector > 0  # clip's log, routed through Tandem's
    # clip logs MiB to two decimals
    assert abs(planned.projector - allocated.projector) <= 0.1 * allocated.projector + 2**20 / 100
    assert "projector" in planned.describe()


@pytest.mark.parametrize("k", [3, "auto"])
def test_mtp_after_an_image_equals_baseline(vision, k):
    prompt = vision.format_chat(ask("What is in this picture?", png()))
    assert sum(1 for t in prompt if t < 0) > 50  # the image's positions
    vision.reset()
    base = vision.run(prompt, GenerationConfig(max_tokens=48, spec="none"))
    vision.reset()
    mtp = vision.run(prompt, GenerationConfig(max_tokens=48, spec="mtp", draft_max=k))
    assert mtp.stats.mode == "mtp" and mtp.stats.draft_tokens > 0 and mtp.stats.acceptance_rate is not None
    assert mtp.tokens == base.tokens and len(base.tokens) == 48


@pytest.mark.parametrize("k", [3, "auto"])
def test_mtp_after_audio_equals_baseline(vision, k):
    """E2B/E4B hear too: the synthetic projector has a gemma4a conformer beside the vision tower."""
    assert vision.projector.audio
    msgs = [{"role": "user", "content": "What do you hear?", "media": [load_media(tone(), "tone.wav")]}]
    prompt = vision.format_chat(msgs)
    assert sum(1 for t in prompt if t < 0) > 20  # the sound's positions
    vision.reset()
    base = vision.run(prompt, GenerationConfig(max_tokens=40, spec="none"))
    vision.reset()
    mtp = vision.run(prompt, GenerationConfig(max_tokens=40, spec="mtp", draft_max=k))
    assert mtp.stats.mode == "mtp" and mtp.stats.draft_tokens > 0
    assert mtp.tokens == base.tokens and len(base.tokens) == 40
    with pytest.raises(MediaError, match="could not be decoded"):  # a WAV header with no sound after it
        vision.format_chat([{"role": "user", "content": "x", "media": [
            load_media(b"RIFF" + (36).to_bytes(4, "little") + b"WAVEfmt " + bytes(28), "empty.wav")]}])


def test_a_different_image_gives_a_different_prompt_and_answer(vision):
    vision.reset()
    a = vision.run(vision.format_chat(ask("Describe.", png(seed=1))), GenerationConfig(max_tokens=16))
    b = vision.run(vision.format_chat(ask("Describe.", png(seed=2))), GenerationConfig(max_tokens=16))
    assert b.stats.reused_tokens < a.stats.prompt_tokens - 40  # the new image was decoded, not reused
    assert b.stats.media_s > 0


def test_follow_up_reuses_the_encoded_image(vision):
    vision.reset()
    msgs = ask("What is this?", png(seed=3))
    first = vision.run(vision.format_chat(msgs), GenerationConfig(max_tokens=20))
    assert first.stats.media_s > 0
    msgs += [{"role": "assistant", "content": first.answer}, {"role": "user", "content": "And the colours?"}]
    prompt = vision.format_chat(msgs)
    follow = vision.run(prompt, GenerationConfig(max_tokens=20, draft_max=3))
    n_img = sum(1 for t in prompt if t < 0)
    assert follow.stats.reused_tokens > n_img and follow.stats.media_s == 0.0  # neither decoded nor encoded again
    vision.reset()
    fresh = vision.run(prompt, GenerationConfig(max_tokens=20, draft_max=3))
    assert fresh.tokens == follow.tokens and fresh.stats.media_s == 0.0  # encoded once, cached by content


def test_bad_projectors_are_refused_in_words(tiny, tmp_path):
    wide = write_projector(tmp_path / "mmproj-wide.gguf", 96)
    with pytest.raises(ModelFileError, match="belongs to another Gemma 4 size"):
        Engine.load(tiny["target"], None, mmproj=wide)
    raw = (tiny["target"].parent / "mmproj-tiny.gguf").read_bytes()
    cut = tmp_path / "mmproj-cut.gguf"
    cut.write_bytes(raw[:200])
    with pytest.raises(ModelFileError, match="truncated"):
        Engine.load(tiny["target"], None, mmproj=cut)
    with pytest.raises(ModelFileError, match="not a vision/audio projector"):
        Engine.load(tiny["target"], None, mmproj=tiny[0.7])
    siglip = write_projector(tmp_path / "mmproj-other.gguf", 64, kind="gemma3")
    with pytest.raises(ModelFileError, match="not Gemma 4's"):
        Engine.load(tiny["target"], None, mmproj=siglip)


def test_bad_media_is_refused_in_words(vision, engine07, tmp_path):
    with pytest.raises(MediaError, match="not a picture or sound"):
        load_media(b"hello, not an image", "notes.png")
    huge = io.BytesIO()
    Image.new("1", (20000, 20000)).save(huge, "PNG")  # 400 megapixels in a small file
    with pytest.raises(MediaError, match="huge.png: the picture is too large"):
        load_media(huge.getvalue(), "huge.png")
    mid = io.BytesIO()
    Image.new("1", (9000, 9000)).save(mid, "PNG")  # 81 MP: under Pillow's guard, over ours
    with pytest.raises(MediaError, match="9000x9000 pixels"):
        load_media(mid.getvalue(), "mid.png")
    with pytest.raises(MediaError, match="damaged"):
        load_media(png()[:200], "cut.png")
    with pytest.raises(MediaError, match="cannot be read"):
        load_media(tmp_path / "missing.png")
    with pytest.raises(MediaError, match="no projector"):
        engine07.format_chat(ask("What?", png()))
    eyes_only = Engine.load(tiny_target(vision), None, mmproj=write_projector(tmp_path / "mmproj-v.gguf", 64))
    try:
        assert eyes_only.projector.vision and not eyes_only.projector.audio
        with pytest.raises(MediaError, match="reads no audio"):
            eyes_only.format_chat([{"role": "user", "content": "Listen", "media": [load_media(tone(), "a.wav")]}])
    finally:
        eyes_only.close()
    # a big picture is scaled down before mtmd sees it, and the answer still comes
    big = load_media(png(3000, 1000), "wide.png")
    assert (big.nx, big.ny) == (2048, 683)
    vision.reset()
    assert vision.run(vision.format_chat([{"role": "user", "content": "Hi", "media": [big]}]),
                      GenerationConfig(max_tokens=4)).stats.generated_tokens == 4


def test_user_text_cannot_forge_a_media_marker(vision):
    with_img = vision.format_chat(ask("a \ue0020\ue003 b <__media__>", png()))
    plain = vision.format_chat(ask("a 0 b <__media__>", png()))
    assert with_img == plain  # the placeholder characters are dropped; mtmd's marker text stays text
