"""export: a branch per patch (stacked, or each on the base after an independence check) made with
git am -3 -k, a folder per patch with the draft PR's title, body, labels and commands; the checkout
is left exactly as before, and on every failure nothing is left behind."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from patchqueue_fixtures import (
    REAL_TORCH,
    UPSTREAM_SUITE,
    Project,
    git,
    git_state,
    make_project,
    tree_hash,
)

from tools.patchqueue.cli import main
from tools.patchqueue.export import (
    body_markdown,
    ends_sentence,
    is_backport,
    labels,
    parse_message,
    sentence_units,
    starts_sentence,
    suite_folds,
    topic,
)
from tools.patchqueue.lint import RUFF_CONFIG
from tools.patchqueue.series import load_series, parse_patch

ROOT = Path(__file__).resolve().parents[1]
PATCHES = ROOT / "patches"


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return make_project(tmp_path)


def run(project: Project, *args: str) -> int:
    return main(["--series", str(project.series), *args])


def checkout_state(repo: Path) -> tuple[str, ...]:
    """git_state without the branch list (export adds branches, nothing else)."""
    state = git_state(repo)
    return (*state[:2], *state[3:], git(repo, "worktree", "list", "--porcelain"))


def names(project: Project) -> list[str]:
    return [p.name.removesuffix(".patch") for p in load_series(project.series).patches]


def add_dependent_patch(project: Project) -> str:
    """A fourth patch that edits the test file 0001 adds: it does not apply alone on the base."""
    repo, series = project.repo, project.series
    first = sorted(series.glob("0001-*.patch"))[0]
    git(repo, "checkout", "-q", "-b", "dep", project.base)
    git(repo, "am", "-q", "-k", str(first))
    (repo / "test" / "test_amp_default.py").write_text("def test_default():\n    assert 1\n")
    git(repo, "commit", "-q", "-am", "[amp] Tighten the default test")
    out = git(
        repo, "format-patch", "-k", "--zero-commit", "--no-signature", "--start-number", "4",
        "-o", str(series), "-1",
    ).strip()  # fmt: skip
    git(repo, "checkout", "-q", "main")
    git(repo, "branch", "-q", "-D", "dep")
    name = Path(out).name
    with (series / "series").open("a") as handle:
        handle.write(name + "\n")
    return name.removesuffix(".patch")


def test_export_makes_a_branch_on_the_base_and_a_folder_per_patch(project, tmp_path) -> None:
    before = checkout_state(project.repo)
    out = tmp_path / "out"
    assert run(project, "export", "--pytorch", str(project.repo), "--out", str(out)) == 0
    assert checkout_state(project.repo) == before
    patches = load_series(project.series).patches
    for patch, name in zip(patches, names(project), strict=True):
        branch = f"device-agnostic/{name}"
        assert git(project.repo, "rev-parse", f"{branch}^").strip() == project.base
        assert git(project.repo, "log", "-1", "--format=%s", branch).strip() == patch.subject
        folder = out / name
        assert sorted(p.name for p in folder.iterdir()) == [
            "body.md", "commands.sh", "labels.txt", "title.txt",
        ]  # fmt: skip
        assert (folder / "title.txt").read_text() == patch.subject + "\n"
        body = (folder / "body.md").read_text()
        assert "## How this change was produced" in body and "AI assistance" in body
        assert "scripts/patches" not in body  # no instructions to run this project's tools
        assert "Suggested labels (for a maintainer to apply): `module: " in body
        assert "Reviewed by: <fill in before opening the PR>" in body
        script = (folder / "commands.sh").read_text()
        assert "--label" not in script  # outside contributors cannot set labels
        refused = subprocess.run(  # in a non-repo folder: a broken guard could not push
            ["bash", str(folder / "commands.sh")], capture_output=True, cwd=tmp_path
        )
        assert refused.returncode == 1 and b"fill in the reviewer" in refused.stderr
        assert f"\ngit push origin {branch}\n" in script
        assert "gh pr create --draft --repo pytorch/pytorch --title " in script
        assert f"--body-file {folder / 'body.md'} --base main --head {branch}" in script
    assert "open source" in (out / names(project)[0] / "labels.txt").read_text()


def test_stacked_export_puts_each_branch_on_the_previous(project, tmp_path) -> None:
    before = checkout_state(project.repo)
    out = tmp_path / "out"
    args = ["export", "--pytorch", str(project.repo), "--out", str(out), "--stack"]
    assert run(project, *args) == 0
    assert checkout_state(project.repo) == before
    parent = project.base
    for name in names(project):
        branch = f"device-agnostic/{name}"
        assert git(project.repo, "rev-parse", f"{branch}^").strip() == parent
        parent = git(project.repo, "rev-parse", branch).strip()
    # The top of the stack is the whole series.
    assert (out / names(project)[-1] / "commands.sh").is_file()


def test_a_dependent_patch_needs_stack_and_leaves_nothing_behind(project, tmp_path, capsys):
    dependent = add_dependent_patch(project)
    before = git_state(project.repo)  # branch list included
    out = tmp_path / "out"
    assert run(project, "export", "--pytorch", str(project.repo), "--out", str(out)) == 1
    err = capsys.readouterr().err
    assert f"{dependent}.patch: does not apply alone on the base" in err
    assert "--stack" in err and "test/test_amp_default.py" in err
    assert git_state(project.repo) == before
    assert not out.exists()
    args = ["export", "--pytorch", str(project.repo), "--out", str(out), "--stack"]
    assert run(project, *args) == 0
    top = git(project.repo, "rev-parse", f"device-agnostic/{dependent}^").strip()
    assert top == git(project.repo, "rev-parse", f"device-agnostic/{names(project)[-2]}").strip()


def add_trailer(patch_file: Path, line: str) -> None:
    """Append a trailer line to the patch's trailer block (the lines before ``---``)."""
    text = patch_file.read_text()
    head, sep, rest = text.partition("\n---\n")
    head = head.rstrip("\n")
    last = head.rsplit("\n", 1)[-1]
    in_block = ": " in last and not last.startswith(("Subject:", "Date:", "From:"))
    patch_file.write_text(head + ("\n" if in_block else "\n\n") + line + "\n" + sep + rest)


def test_a_depends_on_trailer_branches_the_patch_from_what_it_needs(project, tmp_path) -> None:
    dependent = add_dependent_patch(project)
    first = names(project)[0]
    add_trailer(project.series / f"{dependent}.patch", f"Depends-On: {first}.patch")
    out = tmp_path / "out"
    assert run(project, "export", "--pytorch", str(project.repo), "--out", str(out)) == 0
    parent = git(project.repo, "rev-parse", f"device-agnostic/{dependent}^").strip()
    assert parent == git(project.repo, "rev-parse", f"device-agnostic/{first}").strip()
    body = (out / dependent / "body.md").read_text()
    subject = load_series(project.series).patches[0].subject
    assert f'Stacked on the PR "{subject}", which must land first' in body
    assert f"{first}.patch" not in body.split("## Related")[0]  # named by its PR title


def test_a_depends_on_that_is_not_an_earlier_patch_is_refused(project, tmp_path, capsys):
    first = sorted(project.series.glob("0001-*.patch"))[0]
    add_trailer(first, "Depends-On: 0009-missing.patch")
    before = git_state(project.repo)
    out = tmp_path / "out"
    assert run(project, "export", "--pytorch", str(project.repo), "--out", str(out)) == 2
    assert "Depends-On 0009-missing.patch" in capsys.readouterr().err
    assert git_state(project.repo) == before and not out.exists()


@pytest.mark.parametrize(
    ("author", "config"),
    [
        (None, ("Seed maintainers", "maintainers@users.noreply.a-seed-89d6aeb5.example")),
        (None, ("Test", "test@example.com")),
        ("Someone <someone@mail.invalid>", None),
        ("no-email-here", None),
        (None, None),
    ],
)
def test_a_missing_or_placeholder_author_is_refused(
    project, tmp_path, capsys, monkeypatch, author, config
):
    for variable in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "EMAIL"):
        monkeypatch.delenv(variable, raising=False)
    if config is None:
        git(project.repo, "config", "--unset", "user.name")
        git(project.repo, "config", "--unset", "user.email")
    else:
        git(project.repo, "config", "user.name", config[0])
        git(project.repo, "config", "user.email", config[1])
    before = git_state(project.repo)
    out = tmp_path / "out"
    args = ["export", "--pytorch", str(project.repo), "--out", str(out)]
    if author:
        args += ["--author", author]
    assert run(project, *args) == 2
    err = capsys.readouterr().err
    assert "placeholder" in err or "no author" in err or "expected 'Full Name" in err
    assert git_state(project.repo) == before and not out.exists()


def test_commits_are_authored_by_the_person_exporting(project, tmp_path) -> None:
    out = tmp_path / "out"
    args = ["export", "--pytorch", str(project.repo), "--out", str(out)]
    assert run(project, *args, "--author", "Ada Lovelace <ada@lovelace.dev>") == 0
    for name in names(project):
        who = git(
            project.repo, "log", "-1", "--format=%an <%ae>|%cn <%ce>", f"device-agnostic/{name}"
        )
        assert who.strip() == "Ada Lovelace <ada@lovelace.dev>|Ada Lovelace <ada@lovelace.dev>"


def test_backports_and_forwarded_patches_leave_the_forward_queue(project, tmp_path, capsys):
    first, second, third = sorted(project.series.glob("000[123]-*.patch"))
    add_trailer(first, "Applied-Upstream: v2.14.0 (pytorch/pytorch#123)")
    add_trailer(second, "Forwarded: #456")
    add_trailer(third, "Export: hold until pytorch/pytorch#789 lands")
    out = tmp_path / "out"
    assert run(project, "export", "--pytorch", str(project.repo), "--out", str(out)) == 0
    printed = capsys.readouterr().out
    assert f"{first.name}: not exported: upstream already has it" in printed
    assert f"{second.name}: not exported: open upstream PR #456 carries this change" in printed
    assert f"{third.name}: not exported: held (Export: hold): until pytorch/pytorch#789" in printed
    assert len(names(project)) == 3 and not out.exists()  # nothing left to export
    branches = git(project.repo, "for-each-ref", "--format=%(refname:short)", "refs/heads")
    assert first.stem not in branches and second.stem not in branches


def test_a_failing_git_am_deletes_the_branches_it_made(project, tmp_path, capsys) -> None:
    # The dry run passes but git am refuses the second patch (its applypatch-msg hook says no).
    hook = project.repo / ".git" / "hooks" / "applypatch-msg"
    hook.parent.mkdir(exist_ok=True)
    hook.write_text('#!/bin/sh\n! grep -q checkpoint "$1"\n')
    hook.chmod(0o755)
    before = git_state(project.repo)
    out = tmp_path / "out"
    assert run(project, "export", "--pytorch", str(project.repo), "--out", str(out)) == 1
    err = capsys.readouterr().err
    assert "0002-checkpoint-Preserve-RNG-state-on-every-accelerator.patch: git am -3 -k" in err
    assert git_state(project.repo) == before
    assert not out.exists()


@pytest.mark.parametrize("case", ["not-git", "dirty", "wrong-base", "out-not-empty", "branch"])
def test_bad_input_is_refused_and_the_checkout_untouched(project, tmp_path, capsys, case) -> None:
    repo, out = project.repo, tmp_path / "out"
    expected = {
        "not-git": "not a git checkout",
        "dirty": "uncommitted changes",
        "wrong-base": "is not in this checkout",
        "out-not-empty": "not empty",
        "branch": "already exists",
    }[case]
    if case == "not-git":
        repo = tmp_path / "plain"
        shutil.copytree(project.repo, repo, ignore=shutil.ignore_patterns(".git"))
    elif case == "dirty":
        init = repo / "torch" / "__init__.py"
        init.write_text(init.read_text() + "# local\n")
    elif case == "wrong-base":
        series_file = project.series / "series"
        series_file.write_text(series_file.read_text().replace(project.base, "ab" * 20))
    elif case == "out-not-empty":
        out.mkdir()
        (out / "keep.txt").write_text("mine\n")
    else:
        git(repo, "branch", f"device-agnostic/{names(project)[1]}")
    before = git_state(repo) if case != "not-git" else tree_hash(repo)
    out_before = sorted(out.rglob("*")) if out.exists() else None
    assert run(project, "export", "--pytorch", str(repo), "--out", str(out)) == 2
    assert expected in capsys.readouterr().err
    assert (git_state(repo) if case != "not-git" else tree_hash(repo)) == before
    assert (sorted(out.rglob("*")) if out.exists() else None) == out_before


def test_body_follows_the_pr_template_for_a_real_patch() -> None:
    for patch in load_series(PATCHES).patches:
        message = parse_message(patch)
        body = body_markdown(patch)
        bug = re.search(r"#(\d+)$|/issues/(\d+)$", message.trailers.get("Bug", ""))
        if bug:
            assert body.startswith(f"Fixes #{bug.group(1) or bug.group(2)}\n"), patch.name
        else:
            assert body.startswith("Fixes: no upstream issue\n"), patch.name
        summary = message.paragraphs[0].split("\n")[0]
        assert f"## Summary\n\n{summary}" in body
        assert "## Upstream state\n\n- Issue: " in body and "## Behaviour changes" in body
        changes = body.split("## Behaviour changes\n\n", 1)[1].split("\n\n## ", 1)[0]
        assert "states no behaviour change" not in changes, patch.name  # every body says it
        for paragraph in changes.split("\n\n"):
            assert body.count(paragraph) == 1, (patch.name, paragraph)  # not in Details too
        assert "## Test plan" in body and "BC-breaking: " in body
        assert "\nBug: " not in body.split("## Related")[0]  # trailers not in the summary
    first = parse_patch(PATCHES / "0001-amp-gradscaler-default-device.patch")
    assert body_markdown(first).startswith("Fixes: no upstream issue")
    assert labels(parse_message(first))[:2] == [
        "module: amp (automated mixed precision)", "open source",
    ]  # fmt: skip


def test_every_real_body_cuts_sections_between_sentences_only() -> None:
    """Summary ends on a sentence end, Details and Behaviour changes begin with a sentence, for
    every real patch; no body tells the reviewer to run this project's tools."""
    for patch in load_series(PATCHES).patches:
        body = body_markdown(patch)
        summary = body.split("## Summary\n\n", 1)[1].split("\n\n#", 1)[0]
        assert ends_sentence(summary.rsplit("\n\n", 1)[-1]), (patch.name, summary[-200:])
        for heading in ("### Details", "## Behaviour changes"):
            if heading in body:
                section = body.split(heading + "\n\n", 1)[1]
                assert starts_sentence(section), (patch.name, heading, section[:200])
                text = section.split("\n\n#", 1)[0]
                assert ends_sentence(text.rsplit("\n\n", 1)[-1]), (patch.name, heading)
        assert "scripts/patches" not in body, patch.name


def test_a_sentence_over_a_blank_line_stays_in_one_section() -> None:
    paragraphs = (
        "The call raises on such devices,\ne.g.",
        "    TypeError: Cannot create a float64 tensor",
        "so training fails at the first step.",
        "The fix asks the helper.",
    )
    assert sentence_units(paragraphs) == [
        "\n\n".join(paragraphs[:3]),
        "The fix asks the helper.",
    ]


def test_a_stacked_body_names_its_dependency_by_title_and_renders_related_trailers(
    tmp_path,
) -> None:
    source = PATCHES / "0004-amp-gradscaler-no-float64-inverse-scale.patch"
    copy = tmp_path / source.name
    shutil.copyfile(source, copy)
    add_trailer(copy, "Related-PR: pytorch/pytorch#198191 (open) fixes two of the same sites")
    add_trailer(copy, "Related-Issue: pytorch/pytorch#138329 (open) the tracker design")
    add_trailer(copy, "Upstream-Searched: 2026-12-04")
    add_trailer(copy, "Evidence-OpenReg: TypeError: Cannot create or move a torch.float64")
    helper = parse_patch(PATCHES / "0000-accelerator-device-supports-float64.patch")
    body = body_markdown(parse_patch(copy), titles={helper.name: helper.subject})
    assert f'- Stacked on the PR "{helper.subject}", which must land first' in body
    assert "- Related PR #198191 (open): fixes two of the same sites" in body
    assert "- Related issue #138329 (open): the tracker design" in body
    assert "- Open PRs and issues searched on 2026-12-04" in body
    assert "- OpenReg, before the fix: TypeError: Cannot create or move a torch.float64" in body


def test_body_takes_the_evidence_from_a_verify_json(tmp_path) -> None:
    patch = parse_patch(PATCHES / "0002-dlpack-privateuse1-device.patch")

    def run_(outcome: str, summary: str) -> dict:
        return {"outcome": outcome, "summary": summary, "failing": []}

    report = {
        "torch": "2.13.0+cpu",
        "patches": [
            {
                "patch": patch.name,
                "verdict": "proven",
                "tests": [
                    {
                        "file": "test/test_dlpack_privateuse1.py",
                        "stock_neuron": run_("failed", "FAILED (errors=1)"),
                        "patched_neuron": run_("passed", "OK (1 passed, 2 skipped)"),
                        "stock_cpu": {
                            "outcome": "failed",
                            "summary": "FAILED (failures=1)",
                            "failing": ["FAIL: TestDLPackMock.test_device"],
                        },
                        "patched_cpu": run_("passed", "OK (1 passed, 0 skipped)"),
                    }
                ],
            }
        ],
    }
    path = tmp_path / "verify.json"
    path.write_text(json.dumps(report))
    body = body_markdown(patch, report, path)
    assert "must fail): FAILED (errors=1)" in body
    assert "Fails before the fix on:\n- stock torch without any accelerator backend" in body
    assert "`TestDLPackMock`" in body and "PrivateUse1 backend" in body
    assert "(must pass): OK (1 passed, 2 skipped)" in body and "verdict: proven" in body
    assert "run `scripts/patches verify`" not in body


def test_the_real_series_exports_independently(tmp_path) -> None:
    """The forward queue, each patch alone (or on what it Depends-On) on a repository of the
    installed torch's files the series touches, each test folded into a stand-in of the suite
    its Upstream-Test names (the suites at the base are not on this machine): the branch
    changes the suite, adds no test file, and the folded suite passes PyTorch's PYFMT (usort,
    ruff format: export refuses a fold with a finding) and ruff check."""
    repo = tmp_path / "pytorch"
    series = load_series(PATCHES)
    for rel in sorted({f.path for p in series.patches for f in p.files if f.status != "added"}):
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REAL_TORCH.parent / rel, repo / rel)
    (repo / "torch" / "__init__.py").touch()
    suites = {fold.suite for p in series.patches for fold in suite_folds(p)}
    assert len(suites) >= 15
    for suite in suites:
        (repo / suite).parent.mkdir(parents=True, exist_ok=True)
        (repo / suite).write_text(UPSTREAM_SUITE)
    git(tmp_path, "init", "-q", "-b", "main", str(repo))
    git(repo, "config", "user.name", "Test")
    git(repo, "config", "user.email", "test.author@users.noreply.github.com")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    base = git(repo, "rev-parse", "HEAD").strip()
    copy = tmp_path / "patches"
    shutil.copytree(PATCHES, copy)
    text = (copy / "series").read_text().replace(series.base.commit, base)
    (copy / "series").write_text(text)
    out = tmp_path / "out"
    args = ["--series", str(copy), "export", "--pytorch", str(repo), "--out", str(out)]
    assert main(args) == 0
    forward = [p for p in series.patches if is_backport(parse_message(p)) is None]
    assert 0 < len(forward) < len(series.patches)  # 0016 is upstream: a backport only
    assert sorted(p.name for p in out.iterdir()) == sorted(topic(p) for p in forward)
    assert git(repo, "status", "--porcelain") == ""
    folded = tmp_path / "folded"
    for patch in forward:
        branch = f"device-agnostic/{topic(patch)}"
        changed = git(repo, "show", "--name-status", "--format=", branch).split()
        (fold,) = suite_folds(patch)
        assert fold.suite in changed and fold.new not in changed, (patch.name, changed)
        target = folded / topic(patch) / fold.suite
        target.parent.mkdir(parents=True)
        target.write_text(git(repo, "show", f"{branch}:{fold.suite}"))
    ruff = [str(Path(sys.executable).with_name("ruff")), "--config", str(RUFF_CONFIG)]
    for command in (["format", "--check"], ["check"]):
        run = subprocess.run(
            [ruff[0], *command, ruff[1], ruff[2], "--no-cache", "."],
            cwd=folded,
            capture_output=True,
            text=True,
        )
        assert run.returncode == 0, run.stdout + run.stderr


def test_export_base_cuts_the_branches_from_main(project, tmp_path) -> None:
    # main has moved on since the series' base: --base main starts every branch there.
    (project.repo / "README.md").write_text("newer main\n")
    git(project.repo, "add", "README.md")
    git(project.repo, "commit", "-q", "-m", "main moves on")
    head = git(project.repo, "rev-parse", "HEAD").strip()
    out = tmp_path / "out"
    assert run(project, "export", "--pytorch", str(project.repo), "--out", str(out),
               "--base", "main") == 0  # fmt: skip
    for name in names(project):
        assert git(project.repo, "rev-parse", f"device-agnostic/{name}^").strip() == head


def test_a_base_that_is_not_on_main_is_refused(project, tmp_path, capsys) -> None:
    # A release commit: on its own branch, not an ancestor of main.
    git(project.repo, "checkout", "-q", "-b", "release/2.13", project.base)
    (project.repo / "version.txt").write_text("2.13.0\n")
    git(project.repo, "add", "version.txt")
    git(project.repo, "commit", "-q", "-m", "release 2.13.0")
    git(project.repo, "checkout", "-q", "main")
    before = git_state(project.repo)
    out = tmp_path / "out"
    assert run(project, "export", "--pytorch", str(project.repo), "--out", str(out),
               "--base", "release/2.13") == 2  # fmt: skip
    err = capsys.readouterr().err
    assert "--base release/2.13" in err and "is not on main" in err
    assert "export with --base origin/main" in err and "refresh --onto" in err
    assert git_state(project.repo) == before and not out.exists()


def test_an_upstream_test_suite_missing_from_the_checkout_names_the_closest(
    project, tmp_path, capsys
) -> None:
    # 0048's case: test/distributed/test_state_dict_utils.py does not exist; the suite is in
    # test/distributed/checkpoint/.
    suite = project.repo / "test" / "distributed" / "checkpoint" / "test_state_dict_utils.py"
    suite.parent.mkdir(parents=True)
    suite.write_text(UPSTREAM_SUITE)
    git(project.repo, "add", "-A")
    git(project.repo, "commit", "-q", "-m", "the suite")
    first = sorted(project.series.glob("0001-*.patch"))[0]
    add_trailer(first, "Upstream-Test: test/distributed/test_state_dict_utils.py")
    out = tmp_path / "out"
    assert run(project, "export", "--pytorch", str(project.repo), "--out", str(out),
               "--base", "main") == 2  # fmt: skip
    err = capsys.readouterr().err
    assert (
        f"{first.name}: Upstream-Test names test/distributed/test_state_dict_utils.py, which "
        "does not exist at"
    ) in err
    assert (
        "the closest existing path is test/distributed/checkpoint/test_state_dict_utils.py" in err
    )


def _openreg_report(patch_name: str, openreg_failing: list[str]) -> dict:
    """A verify JSON record of one test file whose stock OpenReg run fails ``openreg_failing``
    (the CPU run fails its mock, both pass after)."""

    def run_(outcome: str, summary: str, failing: list[str]) -> dict:
        return {"outcome": outcome, "summary": summary, "failing": failing}

    passed = run_("passed", "OK (3 passed, 0 skipped)", [])
    return {
        "torch": "2.13.0+cpu",
        "patches": [
            {
                "patch": patch_name,
                "verdict": "proven",
                "tests": [
                    {
                        "file": "test/test_amp_gradscaler_default_device.py",
                        "stock_neuron": run_("failed", "FAILED (failures=2)", []),
                        "patched_neuron": passed,
                        "stock_cpu": run_(
                            "failed",
                            "FAILED (failures=1)",
                            ["FAIL: TestGradScalerDefaultDeviceMock.test_default_device"],
                        ),
                        "patched_cpu": passed,
                        "stock_openreg": run_(
                            "failed", f"FAILED (failures={len(openreg_failing)})", openreg_failing
                        ),
                        "patched_openreg": passed,
                    }
                ],
            }
        ],
    }


def _fails_before(body: str) -> str:
    return body.split("Fails before the fix on:\n", 1)[1].split("\n\n", 1)[0]


def test_a_body_names_openreg_as_failing_only_when_its_device_fails() -> None:
    """A mock fails on any build: when only ...Mock classes failed on OpenReg, the body must not
    list OpenReg among the devices the test fails on, and says that only its mocks failed."""
    patch = parse_patch(PATCHES / "0001-amp-gradscaler-default-device.patch")
    mocks = ["FAIL: TestGradScalerDefaultDeviceMock.test_default_device"] * 2
    body = body_markdown(patch, _openreg_report(patch.name, mocks))
    assert "OpenReg" not in _fails_before(body)
    assert (
        "On OpenReg, PyTorch's in-tree PrivateUse1 test backend, only mock classes fail before "
        "the fix (2 tests: `TestGradScalerDefaultDeviceMock`); a mock fails on any build, so "
        "this is no failure of the OpenReg device"
    ) in body
    device = [*mocks, "FAIL: TestGradScalerDefaultDevicePRIVATEUSE1.test_step_openreg"]
    body = body_markdown(patch, _openreg_report(patch.name, device))
    assert (
        "- the OpenReg device (PyTorch's in-tree PrivateUse1 test backend): "
        "`TestGradScalerDefaultDevicePRIVATEUSE1`"
    ) in _fails_before(body)
    assert "only mock classes fail" not in body
