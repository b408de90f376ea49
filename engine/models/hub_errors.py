"""huggingface_hub's exceptions as one line a user can act on (downloads, and the clustered
head's centroids read from a checkpoint)."""

from __future__ import annotations

from ..errors import TandemError


class DownloadError(TandemError):
    pass


def hub_error(e: Exception, repo: str) -> DownloadError:
    """Turn huggingface_hub's exceptions into one line a user can act on."""
    from huggingface_hub import errors

    if isinstance(e, errors.GatedRepoError):
        return DownloadError(
            f"{repo} is gated: accept its licence on huggingface.co, then log in with "
            "`hf auth login` (or set HF_TOKEN) and try again")
    if isinstance(e, errors.RepositoryNotFoundError):
        return DownloadError(f"{repo} was not found on the Hub (or it is private and no token is set)")
    if isinstance(e, errors.RemoteEntryNotFoundError):
        return DownloadError(f"a file is missing from {repo}: {e}")
    if isinstance(e, errors.OfflineModeIsEnabled) or isinstance(e, errors.LocalEntryNotFoundError):
        return DownloadError("offline (HF_HUB_OFFLINE is set, or the Hub cannot be reached) and the "
                             "file is not in the local cache")
    if isinstance(e, errors.HfHubHTTPError):
        code = getattr(getattr(e, "response", None), "status_code", None)
        if code == 401:
            return DownloadError(f"{repo} needs a Hugging Face token: run `hf auth login` or set HF_TOKEN")
        return DownloadError(f"the Hub refused the request for {repo} ({code}): {str(e).splitlines()[0]}")
    return DownloadError(f"download from {repo} failed: {type(e).__name__}: {e}")
