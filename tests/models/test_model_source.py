import pytest

from ds4_converge.spec.sources import HfSource, HttpsSource, LocalSource, parse_source

Q2 = "DeepSeek-V4-Flash-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-chat-v2-imatrix.gguf"


def test_hf_source_defaults_to_main_revision():
    src = parse_source(f"hf://antirez/deepseek-v4-gguf/{Q2}")
    assert src == HfSource("antirez/deepseek-v4-gguf", Q2, "main")
    assert src.filename == Q2 and src.name == Q2


def test_hf_source_with_revision_and_subfolder():
    src = parse_source("hf://org/repo/sub/dir/model.gguf@refs/pr/3")
    assert src == HfSource("org/repo", "sub/dir/model.gguf", "refs/pr/3")
    assert src.name == "model.gguf"
    assert str(src) == "hf://org/repo/sub/dir/model.gguf@refs/pr/3"


def test_https_and_local_sources():
    assert parse_source("https://example.org/m/x.gguf") == HttpsSource("https://example.org/m/x.gguf")
    assert parse_source("https://example.org/m/x.gguf").filename == "x.gguf"
    assert parse_source("/srv/gguf/x.gguf") == LocalSource("/srv/gguf/x.gguf")
    assert parse_source("gguf/x.gguf").filename == "x.gguf"


@pytest.mark.parametrize("value", [
    "hf://org/repo/DeepSeek-*.gguf",
    "hf://org/repo/model?.gguf",
    "https://example.org/m/*.gguf",
    "/srv/gguf/*.gguf",
    "/srv/g?uf/model.gguf",
])
def test_wildcards_are_refused(value):
    with pytest.raises(ValueError, match=r"named exactly"):
        parse_source(value)


def test_query_string_is_not_a_wildcard_and_is_never_printed():
    src = parse_source("https://cdn.example.org/x.gguf?X-Amz-Signature=secret123")
    assert src.filename == "x.gguf"
    assert "secret123" not in str(src) and "secret123" not in repr(src)


@pytest.mark.parametrize("value, message", [
    ("hf://org/model.gguf", "ORG/REPO/FILE"),
    ("hf://org/repo/model.gguf@", "empty revision"),
    ("hf://org/repo/../x.gguf", "not a plain file path"),
    ("ftp://host/x.gguf", "unsupported source"),
    ("http://example.org/x.gguf", "only accepted for loopback"),
    ("https://example.org/", "does not name a file"),
    ("/srv/gguf/", "does not name a file"),
])
def test_bad_sources_say_why(value, message):
    with pytest.raises(ValueError, match=message):
        parse_source(value)


def test_plain_http_is_fine_on_loopback():
    assert parse_source("http://127.0.0.1:8080/x.gguf").filename == "x.gguf"
    assert parse_source("http://localhost/x.gguf").filename == "x.gguf"
