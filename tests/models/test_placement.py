"""Where each model file of a spec lives (models/placement.py), and how the models plan says what it does."""
from pathlib import Path

import pytest

from ds4_converge.models.placement import dest_is_file, place
from ds4_converge.models.role import what_changes
from ds4_converge.spec.model import ModelFile

MODELS = Path("/var/lib/ds4-converge/models")


def where(**entry) -> tuple[Path, bool]:
    return place(ModelFile.model_validate(entry), Path, MODELS)


def test_a_dest_that_ends_in_gguf_is_the_files_own_path():
    # what a user who writes it means: not /srv/gguf/q2.gguf/model.gguf
    assert where(source="https://example.org/m/model.gguf", dest="/srv/gguf/q2.gguf") == (Path("/srv/gguf/q2.gguf"),
                                                                                          True)
    assert where(source="hf://org/repo/model.gguf", dest="/srv/gguf/Q2.GGUF") == (Path("/srv/gguf/Q2.GGUF"), True)
    # a local file copied to a path of its own
    assert where(source="/mnt/usb/model.gguf", dest="/srv/gguf/copy.gguf") == (Path("/srv/gguf/copy.gguf"), True)


@pytest.mark.parametrize("dest", ["/srv/gguf", "/srv/gguf/", "/srv/gguf.d", "/srv/models.gguf/"])
def test_any_other_dest_is_the_folder_the_file_goes_into(dest):
    path, fetched = where(source="https://example.org/m/model.gguf", dest=dest)
    assert (path, fetched) == (Path(dest) / "model.gguf", True)
    assert not dest_is_file(dest)


def test_without_dest_a_download_goes_to_the_roots_models_and_a_local_file_stays_where_it_is():
    assert where(source="https://example.org/m/model.gguf") == (MODELS / "model.gguf", True)
    assert where(source="/mnt/usb/model.gguf") == (Path("/mnt/usb/model.gguf"), False)


def test_the_plan_says_how_many_files_it_downloads_and_removes():
    assert what_changes(1, 0) == "download 1 model file and check it"
    assert what_changes(2, 0) == "download 2 model files and check them"
    assert what_changes(0, 1) == "remove 1 unused model file"
    assert what_changes(1, 3) == "download 1 model file and check it, remove 3 unused model files"
