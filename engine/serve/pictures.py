"""Pictures in a request (OpenAI image_url parts, which the Messages and Responses APIs are
translated into): counted and checked before any is decoded (the model has a projector, not
too many), bounded in pixels all told (read from their headers first), then decoded."""

from __future__ import annotations

from .errors import ApiError

# pictures one request may carry, and their pixels all told (read from their headers before
# any is decoded): a 7.8 KB 1-bit PNG of 8000x8000 decodes to 192 MB of RGB, and forty of them
# in one small request took a gigabyte and held the server for most of a minute
MAX_PICTURES = 16
MAX_REQUEST_PIXELS = 128_000_000


def picture_parts(req) -> int:
    """The request's pictures (image_url parts), counted without decoding any."""
    return sum(1 for m in req.messages if isinstance(m.content, list)
               for p in m.content if isinstance(p, dict) and p.get("type") == "image_url")


def check_pictures(req, engine) -> None:
    """Before any picture is decoded: the model can read them, and there are not too many."""
    n = picture_parts(req)
    if not n:
        return
    projector = getattr(engine, "projector", None)
    field = req._list_name  # "messages", or "input" for a Responses request
    if projector is None or not projector.vision:
        raise ApiError(400, "this model has no projector (mmproj) loaded: it cannot read pictures", param=field)
    if n > MAX_PICTURES:
        raise ApiError(400, f"{field}: {n} pictures in one request; at most {MAX_PICTURES}", param=field)


def picture(image_url, where: str, budget: list[int]):
    import base64
    import binascii

    from ..local.media import MediaError, load_media, picture_pixels

    url = image_url.get("url") if isinstance(image_url, dict) else image_url
    if not isinstance(url, str) or not url.startswith("data:") or ";base64," not in url[:100]:
        raise ApiError(400, f"{where}: pictures are taken as data: URIs (base64); this server fetches no URLs",
                       param=where)
    try:
        raw = base64.b64decode(url.split(",", 1)[1], validate=True)
        budget[0] -= picture_pixels(raw)
        if budget[0] < 0:
            raise ApiError(400, f"{where}: the request's pictures have more than {MAX_REQUEST_PIXELS // 1_000_000} "
                                "megapixels all told; send fewer or smaller pictures", param=where)
        return load_media(raw, where)
    except (binascii.Error, ValueError):
        raise ApiError(400, f"{where}: the picture's base64 data is malformed", param=where) from None
    except MediaError as e:
        raise ApiError(400, str(e), param=where) from None
