"""tools/audit_torch.py on a small torch-shaped tree with a real ``git format-patch`` series:
counts per rule and subpackage, exclusions, stock against patched, per-patch attribution, and
the error when a finding disappears from a file no patch touches."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from patchqueue_fixtures import git

import tools.audit_torch as audit_torch
from tools.audit_torch import compare, load_exclusions, main, run_audit, subpackage

# The stock tree: (path under site-packages, contents). Findings noted per line.
STOCK = {
    "torch/__init__.py": '"""torch."""\n',
    "torch/_tensor.py": (
        "def dlpack_device(self):\n"
        '    if self.device.type == "privateuse1":  # DA108\n'
        "        return 1\n"
        "    return 0\n"
    ),
    "torch/amp/__init__.py": "",
    "torch/amp/grad_scaler.py": (
        "import torch\n"
        "\n"
        "\n"
        'def make(device: str = "cuda"):  # DA104\n'
        "    return torch.cuda.is_available()  # DA101, stays\n"
    ),
    "torch/nn/__init__.py": "",
    "torch/nn/mod.py": (
        "def move(module, x):\n    module.cuda()  # DA102\n    return x.is_cuda  # DA106\n"
    ),
    "torch/cuda/__init__.py": (
        "import torch\n"
        "\n"
        "def sync():\n"
        "    torch.cuda.synchronize()  # DA101, excluded\n"
        "    torch.cuda.synchronize()  # DA101, excluded\n"
    ),
    "torch/testing/_internal/common.py": (
        'DEVICE = "cuda"  # DA103, excluded\nx = t.to("cuda")  # DA103, excluded\n'
    ),
}

EXCLUSIONS = """
[[exclude]]
name = "torch.cuda"
paths = ["torch/cuda/**"]
reason = "the CUDA device module"

[[exclude]]
name = "test infrastructure"
paths = ["torch/testing/_internal/**"]
reason = "device-specific test helpers"

[[exclude]]
name = "unused"
paths = ["torch/nope/*.py"]
reason = "matches nothing"

[[kept]]
name = "nn"
paths = ["torch/nn/**"]
reason = "generic"
"""


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _edit(root: Path, rel: str, old: str, new: str) -> None:
    path = root / rel
    text = path.read_text()
    assert old in text, (rel, old)
    path.write_text(text.replace(old, new, 1))


def _commit(repo: Path, message: str) -> None:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(installed torch dir, patches dir, exclusions file) for the synthetic tree.

    0001 fixes the DA104 default and inserts lines above the DA101 that stays (a shifted
    finding must not count as removed); 0002 changes _tensor.py without touching its finding
    and adds a test; 0003 fixes the DA108 comparison and adds a new "cuda" allow-list (DA107);
    0004 removes one finding from the excluded torch/cuda.
    """
    repo = tmp_path / "pytorch"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.name", "Test")
    git(repo, "config", "user.email", "test@example.com")
    git(repo, "config", "commit.gpgsign", "false")
    for rel, text in STOCK.items():
        _write(repo, rel, text)
    _commit(repo, "base")
    base = git(repo, "rev-parse", "HEAD").strip()
    scaler = "torch/amp/grad_scaler.py"
    _edit(repo, scaler, 'device: str = "cuda"', "device: str | None = None")
    _edit(repo, scaler, "import torch\n", "import torch\n\n# patched\n# twice\n")
    _commit(repo, "[amp] default device")
    _edit(repo, "torch/_tensor.py", "    return 0\n", "    return 0  # p2\n")
    _write(repo, "test/test_tensor.py", "def test_x():\n    pass\n")
    _commit(repo, "[tensor] comment")
    _edit(
        repo,
        "torch/_tensor.py",
        'self.device.type == "privateuse1"',
        "self.device.type == torch._C._get_privateuse1_backend_name()",
    )
    _edit(
        repo,
        "torch/_tensor.py",
        "        return 1\n",
        '        return self.device.type in ("cpu", "cuda")\n',
    )
    _commit(repo, "[dlpack] privateuse1")
    _edit(repo, "torch/cuda/__init__.py", "    torch.cuda.synchronize()  # DA101, excluded\n", "")
    _commit(repo, "[cuda] one sync")
    patches = tmp_path / "patches"
    git(
        repo,
        "format-patch",
        "-q",
        "-k",
        "--zero-commit",
        "--no-signature",
        "-o",
        str(patches),
        base,
    )
    names = sorted(p.name for p in patches.glob("*.patch"))
    (patches / "series").write_text(f"# base: torch 2.13.0 {base}\n" + "\n".join(names) + "\n")

    site = tmp_path / "site-packages"
    for rel, text in STOCK.items():
        _write(site, rel, text)
    _write(site, "torch/version.py", f"__version__ = '2.13.0+cpu'\ngit_version = '{base}'\n")
    exclusions = tmp_path / "exclusions.toml"
    exclusions.write_text(EXCLUSIONS)
    return site / "torch", patches, exclusions


def test_counts_exclusions_and_what_each_patch_fixed(tree) -> None:
    torch_dir, patches, exclusions_file = tree
    site = torch_dir.parent
    before = {p: p.read_bytes() for p in site.rglob("*") if p.is_file()}
    audit = run_audit(torch_dir, patches, load_exclusions(exclusions_file), jobs=1)
    data = audit_torch.to_json(audit)

    assert data["files"] == 9  # with version.py
    assert data["totals"] == {
        "stock": 9,
        "excluded": 4,
        "audited": 5,
        "patched": 4,
        "removed": 2,
        "added": 1,
    }
    assert data["by_rule"] == {
        "DA101": {"stock": 1, "patched": 1},
        "DA102": {"stock": 1, "patched": 1},
        "DA104": {"stock": 1, "patched": 0},
        "DA106": {"stock": 1, "patched": 1},
        "DA107": {"stock": 0, "patched": 1},
        "DA108": {"stock": 1, "patched": 0},
    }
    assert data["by_subpackage"] == {
        "torch (top-level modules)": {"stock": 1, "patched": 1},
        "torch/amp": {"stock": 2, "patched": 1},
        "torch/nn": {"stock": 2, "patched": 2},
    }
    excluded = {e["name"]: (e["files"], e["findings"]) for e in data["excluded"]}
    assert excluded == {"torch.cuda": (1, 2), "test infrastructure": (1, 2), "unused": (0, 0)}
    assert data["kept"][0]["findings"] == 2

    effects = {p["name"][:4]: p for p in data["patches"]}
    assert [p["state"] for p in data["patches"]] == ["applies"] * 4
    assert (effects["0001"]["removed"], effects["0001"]["added"]) == (1, 0)  # shifted DA101 stays
    assert effects["0001"]["touched"] == ["torch/amp/grad_scaler.py"]
    assert (effects["0002"]["removed"], effects["0002"]["added"]) == (0, 0)  # "removed 0"
    assert effects["0002"]["touched"] == ["torch/_tensor.py"]  # test/ is not torch/
    assert (effects["0003"]["removed"], effects["0003"]["added"]) == (1, 1)
    assert (effects["0004"]["removed"], effects["0004"]["removed_in_excluded_modules"]) == (0, 1)
    assert data["errors"] == [] and data["warnings"] == []
    # The installed tree is only read.
    assert {p: p.read_bytes() for p in site.rglob("*") if p.is_file()} == before


def test_main_writes_json_and_the_doc(tree, tmp_path: Path, capsys) -> None:
    torch_dir, patches, exclusions = tree
    doc, out_json = tmp_path / "docs" / "audit.md", tmp_path / "audit.json"
    argv = ["--torch", str(torch_dir), "--series", str(patches), "--exclusions", str(exclusions)]
    assert main([*argv, "--json", str(out_json), "--write-doc", str(doc), "-j", "1"]) == 0
    assert json.loads(out_json.read_text())["totals"]["patched"] == 4
    text = doc.read_text()
    assert "torch: 2.13.0+cpu" in text
    assert f"--write-doc {doc}" in text
    assert "| torch.cuda | `torch/cuda/**` | 1 | 2 | the CUDA device module |" in text
    assert '| DA104 | function parameter defaults to "cuda" | 1 | 1 | 0 | 1 |' in text
    assert "Passed:" in text
    assert "### Per rule" in capsys.readouterr().out


def test_a_finding_gone_from_an_untouched_file_is_an_error(tree, monkeypatch, capsys) -> None:
    torch_dir, patches, exclusions = tree
    original = audit_torch.patched_copy

    def copy_and_tamper(*args: object, **kwargs: object) -> Path:
        copy = original(*args, **kwargs)
        _edit(copy, "nn/mod.py", "    module.cuda()  # DA102\n", "    pass\n")
        return copy

    monkeypatch.setattr(audit_torch, "patched_copy", copy_and_tamper)
    argv = ["--torch", str(torch_dir), "--series", str(patches), "--exclusions", str(exclusions)]
    assert main([*argv, "-j", "1"]) == 1
    err = capsys.readouterr().err
    assert "1 finding(s) disappeared in torch/nn/mod.py, which no patch touches: DA102" in err
    assert "differs by 2" in err  # per patch the net is 1; the tampered copy says 2


def test_compare_flags_both_directions_only_outside_touched_files() -> None:
    a = ("torch/a.py", "DA101", "m", "x")
    b = ("torch/b.py", "DA102", "m", "y")
    c = ("torch/c.py", "DA103", "m", "z")
    removed, added, errors = compare([a, a, b], [a, c], touched={"torch/b.py"})
    assert removed == {a: 1, b: 1} and added == {c: 1}
    assert len(errors) == 2
    assert errors[0].startswith("1 finding(s) disappeared in torch/a.py")
    assert errors[1].startswith("1 finding(s) appeared in torch/c.py")


def test_a_patch_that_does_not_apply_is_an_error(tree) -> None:
    torch_dir, patches, exclusions = tree
    (torch_dir / "_tensor.py").write_text("changed\n")
    audit = run_audit(torch_dir, patches, load_exclusions(exclusions), jobs=1)
    states = [e.state for e in audit.effects]
    assert states == ["applies", "conflicts", "conflicts", "applies"]
    assert any(e.startswith("0002-") and "conflicts" in e for e in audit.errors)


def test_globs_and_subpackages() -> None:
    entry = audit_torch.ModuleEntry("n", ["torch/_native/ops/*/impl.py", "torch/cuda/**"], "r")
    assert entry.matches("torch/_native/ops/topk/impl.py")
    assert not entry.matches("torch/_native/ops/topk/deeper/impl.py")
    assert entry.matches("torch/cuda/amp/grad_scaler.py") and not entry.matches("torch/cudax.py")
    assert subpackage("torch/_inductor/codegen/triton.py") == "torch/_inductor"
    assert subpackage("torch/_tensor.py") == audit_torch.TOP_LEVEL


def test_the_shipped_exclusion_list_parses_with_a_reason_each() -> None:
    exclusions = load_exclusions(audit_torch.DEFAULT_EXCLUSIONS)
    assert exclusions.exclude and all(e.reason and e.paths for e in exclusions.exclude)
    assert exclusions.entry_for("torch/cuda/memory.py").name == "torch.cuda"
    assert exclusions.entry_for("torch/amp/grad_scaler.py") is None


def test_a_torch_with_the_overlay_applied_is_not_stock(tree, capsys) -> None:
    torch_dir, patches, exclusions = tree
    state = torch_dir.parent / ".device_agnostic_patches" / "state.json"
    state.parent.mkdir()
    state.write_text(json.dumps({"format": 1, "state": "applied", "series": []}))
    argv = ["--torch", str(torch_dir), "--series", str(patches), "--exclusions", str(exclusions)]
    assert main(argv) == 2
    assert "the patch overlay is applied" in capsys.readouterr().err
