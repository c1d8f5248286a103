"""hf:// sources against a loopback Hub (HF_ENDPOINT): URL layout, token handling, the Hub's sha256."""
import hashlib
import logging
import os

import pytest
from pydantic import SecretStr

from ds4_converge.models.download import ChecksumMismatch, DownloadError, fetch, partial_path
from ds4_converge.spec.sources import parse_source

REPO, FILE, REV = "antirez/deepseek-v4-gguf", "DeepSeek-V4-Flash-MTP-Q4K-Q8_0-F32.gguf", "main"
RESOLVE = f"/{REPO}/resolve/{REV}/{FILE}"
CDN = "/xet-bridge/blob/abc"
DATA = os.urandom(700_000)
SHA = hashlib.sha256(DATA).hexdigest()
TOKEN = "hf_NeverPrintMeEver0123456789"
PLENTY = lambda _dir: 1 << 50  # noqa: E731


@pytest.fixture
def hub(file_server, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", file_server.base_url)
    file_server.files[RESOLVE] = DATA
    return file_server


def fetch_hf(dest, source=f"hf://{REPO}/{FILE}", **kw):
    kw.setdefault("free_bytes_fn", PLENTY)
    return fetch(parse_source(source), dest, **kw)


def test_hf_source_downloads_from_the_resolve_url(hub, tmp_path):
    result = fetch_hf(tmp_path / FILE, sha256=SHA)
    assert [r.path for r in hub.requests] == [RESOLVE]
    assert result.sha256 == SHA and (tmp_path / FILE).read_bytes() == DATA
    assert hub.requests[0].headers["User-Agent"].startswith("ds4-converge/")


def test_revision_is_part_of_the_url(hub, tmp_path):
    hub.files[f"/{REPO}/resolve/v2/{FILE}"] = DATA
    fetch_hf(tmp_path / FILE, source=f"hf://{REPO}/{FILE}@v2")
    assert hub.requests[-1].path == f"/{REPO}/resolve/v2/{FILE}"


def test_token_from_hf_token_is_sent_as_a_header(hub, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    hub.required_auth = f"Bearer {TOKEN}"
    fetch_hf(tmp_path / FILE)
    assert hub.requests[0].headers["Authorization"] == f"Bearer {TOKEN}"


def test_hf_download_resumes_with_range(hub, tmp_path):
    dest = tmp_path / FILE
    partial_path(dest).write_bytes(DATA[:300_000])
    result = fetch_hf(dest, sha256=SHA)
    assert hub.requests[0].headers["Range"] == "bytes=300000-" and hub.requests[0].status == 206
    assert result.resumed and result.downloaded_bytes == len(DATA) - 300_000


def test_no_token_gives_a_hint_without_secrets(hub, tmp_path):
    hub.required_auth = f"Bearer {TOKEN}"
    with pytest.raises(DownloadError, match=r"access denied .*HTTP 401.*no token found \(set HF_TOKEN"):
        fetch_hf(tmp_path / FILE)


def test_token_never_appears_in_errors_results_or_logs(hub, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    hub.required_auth = "Bearer some-other-token"
    with pytest.raises(DownloadError) as info:
        fetch_hf(tmp_path / FILE, token=TOKEN)
    assert "a token was sent but lacks access" in str(info.value)
    texts = [str(info.value), repr(info.value), *map(str, info.value.args), caplog.text]

    hub.required_auth = None
    hub.cut_after = 1000
    with pytest.raises(DownloadError) as cut:
        fetch_hf(tmp_path / FILE, token=SecretStr(TOKEN))
    result = fetch_hf(tmp_path / FILE, token=SecretStr(TOKEN))
    texts += [str(cut.value), repr(result), caplog.text]
    assert hub.requests[-1].headers["Authorization"] == f"Bearer {TOKEN}"  # it was really used
    assert not [t for t in texts if TOKEN in t]


def test_token_is_not_forwarded_to_another_host_on_redirect(hub, tmp_path):
    """The Hub redirects LFS files to a CDN; requests drops Authorization when the host changes."""
    host, port = hub.base_url.removeprefix("http://").split(":")
    hub.redirects[RESOLVE] = f"http://localhost:{port}{CDN}"
    hub.files[CDN] = DATA
    fetch_hf(tmp_path / FILE, token=TOKEN)
    first, second = hub.requests
    assert first.headers["Authorization"] == f"Bearer {TOKEN}"
    assert second.path == CDN and "Authorization" not in second.headers


def test_hub_sha256_verifies_when_none_is_given(hub, tmp_path):
    hub.extra_headers[RESOLVE] = {"X-Linked-Etag": f'"{SHA}"'}
    hub.corrupt_at = 123
    with pytest.raises(ChecksumMismatch, match=r"Hub sha256"):
        fetch_hf(tmp_path / FILE)
    assert not (tmp_path / FILE).exists() and not partial_path(tmp_path / FILE).exists()


def test_hub_sha256_seen_on_the_redirect_refuses_a_different_expected_file_before_transfer(hub, tmp_path):
    _, port = hub.base_url.removeprefix("http://").split(":")
    hub.redirects[RESOLVE] = f"http://127.0.0.1:{port}{CDN}"
    hub.extra_headers[RESOLVE] = {"X-Linked-Etag": f'"{SHA}"'}
    hub.files[CDN] = DATA
    wanted = "f" * 64
    with pytest.raises(ChecksumMismatch, match=r"as reported by the Hub.*expected f{64}"):
        fetch_hf(tmp_path / FILE, sha256=wanted)
    assert not partial_path(tmp_path / FILE).exists()
