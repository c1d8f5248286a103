"""Importing what a no-op run uses loads none of the heavy libraries: they cost a no-op most of its time and it
needs none of them (numpy and gguf for GGUF constants, huggingface_hub and requests for downloads, rich for
text output, jinja2 for rendering; tenacity, which the probe no longer uses, stays on the list)."""
import subprocess
import sys

NOOP_PATH = ("ds4_converge.cli.main", "ds4_converge.orchestrate.context", "ds4_converge.orchestrate.reconciler",
             "ds4_converge.orchestrate.rollback", "ds4_converge.facts", "ds4_converge.health.probe",
             "ds4_converge.service.render")
HEAVY = ("numpy", "gguf", "huggingface_hub", "requests", "urllib3", "rich", "jinja2", "tenacity",
         "supervisor.xmlrpc")


def test_the_noop_path_imports_nothing_heavy():
    code = (f"import sys\nfor m in {NOOP_PATH!r}: __import__(m)\n"
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]", proc.stdout
