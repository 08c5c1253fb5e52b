"""What travels to the bare GPU machine as wheels (``suite.gpu.wheels``), and what is installed
there: only what that Python lacks, so nothing the machine's torch or JAX need is shadowed."""

import subprocess
import sys
import zipfile

from suite.gpu.wheels import NEVER, closure, install


def test_the_closure_holds_snakemake_and_deepspeed_with_their_needs_not_the_machine_s_stack():
    found = closure()
    for name in ("snakemake", "snakemake-interface-common", "deepspeed", "hjson", "pydantic",
                 "pydantic-core", "jsonschema", "rpds-py", "mlcommons-loadgen"):
        assert name in found, name
    assert not NEVER & set(found)  # no numpy, torch, ... beside the machine's own
    from importlib import metadata
    assert found["deepspeed"] == metadata.version("deepspeed")  # this venv's: the lock's


def _wheel(folder, name, version="1.0"):
    """A minimal pure wheel of one module ``name`` (what pip needs to install it)."""
    path = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name}.py", "VALUE = 42\n")
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                    "Tag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", "")
    return path


def test_install_puts_only_what_this_python_lacks_on_the_path(tmp_path):
    wheels = tmp_path / "whl"
    wheels.mkdir()
    _wheel(wheels, "seedbench_absent_dist")
    (wheels / "PyYAML-0.1-cp312-cp312-manylinux_2_17_x86_64.whl").write_bytes(b"")  # present
    installed, present = install(wheels, tmp_path / "site")
    assert installed == ["seedbench_absent_dist-1.0-py3-none-any.whl"]
    assert len(present) == 1 and present[0].startswith("pyyaml ")
    got = subprocess.run([sys.executable, "-c", "import seedbench_absent_dist as m; "
                          "print(m.VALUE)"], env={"PYTHONPATH": str(tmp_path / "site")},
                         capture_output=True, text=True)
    assert got.stdout.strip() == "42", got.stderr
