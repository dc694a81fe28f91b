"""``export``: one branch per patch in a PyTorch checkout and one folder per patch with what a
person needs to open a draft pull request (title, body, labels, the push and ``gh`` commands).

Only the forward queue is exported: a patch upstream already has (``Applied-Upstream:`` other
than ``no``) or that an open upstream PR carries (``Forwarded: #N``) is a backport for users of
the base version, and opening a second PR for it would duplicate upstream work; such patches are
listed, not exported. A patch that needs an earlier one (``Depends-On: NNNN-topic.patch``, e.g.
the shared float64 helper) is branched from that patch's branch, as a stacked PR.

Commits are authored by the person exporting (``--author``, else ``git config user.name`` /
``user.email`` of the checkout): PyTorch's CLA check matches the author, so a placeholder
identity (an ``example``/``invalid``/``test`` domain, the series' own placeholder) is refused.

Nothing is pushed and no network is touched: commands.sh is written, never run. The branches are
made with ``git am -3 -k`` in a temporary ``git worktree`` at the base commit, so the checkout's
HEAD, branch, index and work tree are never touched; on any failure the branches this run made
are deleted again and the output folder is removed.
"""

from __future__ import annotations

import difflib
import json
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tools.patchqueue import fsops
from tools.patchqueue.engine import plan_series
from tools.patchqueue.errors import BadInput, Conflict
from tools.patchqueue.fold import Fold, fold_test, folds
from tools.patchqueue.gitqueue import _branch_exists, _git, am_output, git_dir, validate_checkout
from tools.patchqueue.lint import lint_texts
from tools.patchqueue.pyfmt import Finding
from tools.patchqueue.series import Base, Patch, Series
from tools.patchqueue.testrun import failing_class, is_mock

BRANCH_PREFIX = "device-agnostic/"
REVIEWER_PLACEHOLDER = "<fill in before opening the PR>"
TRAILER_KEYS = (
    "Bug", "Forwarded", "Applied-Upstream", "Depends-On", "Upstream-Test", "Last-Update",
)  # fmt: skip
# RFC 2606 / 6761 names that can never be a real person's address, and the series' own.
_PLACEHOLDER_DOMAINS = ("example", "example.com", "example.org", "example.net", "invalid",
                        "test", "localhost")  # fmt: skip
_IDENTITY_RE = re.compile(r"\s*([^<>]*?)\s*<([^<>\s@]+@([^<>\s@]+))>\s*")
_PR_RE = re.compile(r"(?:#|github\.com/pytorch/pytorch/pull/)(\d+)")
_AREA_RE = re.compile(r"^\[([^\]]+)\]")
_ISSUE_RE = re.compile(r"github\.com/pytorch/pytorch/issues/(\d+)|^#(\d+)$")

# Suggested labels per [area]; a person confirms them when opening the draft PR.
MODULE_LABELS = {
    "amp": "module: amp (automated mixed precision)",
    "dlpack": "module: dlpack",
    "checkpoint": "module: activation checkpointing",
    "accelerator": "module: accelerator",
    "privateuse1": "module: PrivateUse1",
}
RELEASE_NOTES = {
    "amp": "release notes: amp",
    "dlpack": "release notes: python_frontend",
    "checkpoint": "release notes: autograd",
}


@dataclass(frozen=True)
class Message:
    """A patch's commit message split the way a pull request needs it."""

    subject: str
    paragraphs: tuple[str, ...]  # the body without the test plan and the trailers
    test_plan: str  # the body's "Test plan:" section (without the heading), or ""
    trailers: dict[str, str]  # the first value of each trailer
    all_trailers: tuple[tuple[str, str], ...] = ()  # every trailer, repeated ones too, in order

    def values(self, key: str) -> list[str]:
        """Every value of a repeatable trailer (``Related-PR:``, ``Evidence-*:``)."""
        return [v for k, v in self.all_trailers if k == key]

    @property
    def area(self) -> str:
        """``amp`` for a subject ``[amp] ...``; empty when there is none."""
        match = _AREA_RE.match(self.subject)
        return match.group(1).strip() if match else ""


def parse_message(patch: Patch) -> Message:
    """Split the commit message of a format-patch file (the text between the headers and ---)."""
    lines = patch.path.read_text(encoding="utf-8").split("\n")
    start = next((i for i, line in enumerate(lines) if not line.strip()), len(lines)) + 1
    end = next(
        (i for i in range(start, len(lines)) if lines[i] == "---" or lines[i].startswith("diff ")),
        len(lines),
    )
    body = "\n".join(lines[start:end]).strip("\n")
    paragraphs = [p for p in re.split(r"\n\s*\n", body) if p.strip()]
    trailers: dict[str, str] = {}
    every: list[tuple[str, str]] = []
    if paragraphs:
        last = paragraphs[-1].splitlines()
        pairs = [line.split(":", 1) for line in last]
        if all(len(p) == 2 and re.fullmatch(r"[A-Za-z-]+", p[0]) for p in pairs):
            every = [(k.strip(), v.strip()) for k, v in pairs]
            for key, value in every:
                trailers.setdefault(key, value)
            paragraphs = paragraphs[:-1]
    test_plan: list[str] = []
    rest: list[str] = []
    in_plan = False
    for paragraph in paragraphs:
        if re.match(r"^test plan:?\s*$", paragraph.splitlines()[0].strip(), re.I):
            in_plan = True
            tail = "\n".join(paragraph.splitlines()[1:]).strip("\n")
            if tail:
                test_plan.append(tail)
            continue
        (test_plan if in_plan else rest).append(paragraph)
    return Message(patch.subject, tuple(rest), "\n\n".join(test_plan), trailers, tuple(every))


def topic(patch: Patch) -> str:
    """``0001-amp-gradscaler-default-device`` for ``0001-amp-gradscaler-default-device.patch``."""
    return patch.name.removesuffix(".patch")


def is_backport(message: Message) -> str | None:
    """Why the patch is not in the forward queue (upstream has it, or an open PR carries it);
    None when it is to be exported."""
    hold = message.trailers.get("Export", "").strip()
    if hold.lower().startswith("hold"):
        why = hold[4:].strip(" :-") or "no reason given"
        return f"held (Export: hold): {why}"
    applied = message.trailers.get("Applied-Upstream", "no").strip()
    if applied.lower() not in ("", "no"):
        return f"upstream already has it ({applied}); kept as a backport for the base version"
    forwarded = message.trailers.get("Forwarded", "no").strip()
    match = _PR_RE.search(forwarded)
    if match:
        return (
            f"open upstream PR #{match.group(1)} carries this change; kept as a backport until "
            "it lands (review or help that PR, where the body's differences are argued)"
        )
    return None


def depends_on(message: Message) -> list[str]:
    """The patch file names of the ``Depends-On:`` trailer (comma or space separated)."""
    value = message.trailers.get("Depends-On", "")
    return [name for name in re.split(r"[,\s]+", value) if name]


def author_identity(checkout: Path, author: str | None) -> tuple[str, str]:
    """(name, email) of the person exporting: ``author`` ("Name <email>") or the checkout's git
    config. Raises BadInput when there is none or it is a placeholder."""
    if author is None:
        name = _git(checkout, "config", "user.name", check=False).stdout.strip()
        email = _git(checkout, "config", "user.email", check=False).stdout.strip()
        if not name or not email:
            raise BadInput(
                "no author for the exported commits: set `git config user.name` and "
                "`git config user.email` in the checkout to the person who signs PyTorch's CLA, "
                "or pass --author 'Name <email>'"
            )
        author = f"{name} <{email}>"
    match = _IDENTITY_RE.fullmatch(author)
    if match is None or not match.group(1):
        raise BadInput(f"--author {author!r}: expected 'Full Name <email@domain>'")
    name, email, domain = match.groups()
    domain = domain.lower().rstrip(".")
    if any(domain == d or domain.endswith("." + d) for d in _PLACEHOLDER_DOMAINS):
        raise BadInput(
            f"author {name} <{email}> is a placeholder ({domain} is not a real mail domain): "
            "PyTorch's CLA check would reject the commits; export as yourself (git config "
            "user.name/user.email, or --author)"
        )
    return name, email


def branch_name(patch: Patch) -> str:
    """``device-agnostic/<NNNN-topic>``."""
    return BRANCH_PREFIX + topic(patch)


def labels(message: Message) -> list[str]:
    """Suggested labels: the module of the [area], ``open source``, a release-notes label."""
    area = message.area.lower()
    result = [MODULE_LABELS.get(area, f"module: {area}" if area else "")]
    result += [
        "open source",
        RELEASE_NOTES.get(area, f"release notes: {area or 'python_frontend'}"),
    ]
    return [label for label in result if label]


def _fixes_line(message: Message) -> str:
    bug = message.trailers.get("Bug", "").strip()
    match = _ISSUE_RE.search(bug)
    if match:
        return f"Fixes #{match.group(1) or match.group(2)}"
    return "Fixes: no upstream issue"


def _verify_entry(report: object, patch: Patch) -> object | None:
    """The verify JSON's record of ``patch`` (matched by file name or topic), if any."""
    entries: list = []
    if isinstance(report, dict):
        for key in ("patches", "results"):
            if isinstance(report.get(key), list):
                entries = report[key]
                break
        else:
            if patch.name in report:
                return report[patch.name]
            if topic(patch) in report:
                return report[topic(patch)]
    elif isinstance(report, list):
        entries = report
    for entry in entries:
        if isinstance(entry, dict) and any(
            str(entry.get(key, "")).removesuffix(".patch") == topic(patch)
            for key in ("patch", "name", "file")
        ):
            return entry
    return None


def _evidence(patch: Patch, verify: object | None) -> str:
    """The recorded fail-before/pass-after runs: the verify JSON's record of the patch when one
    is given, and the patch's ``Evidence-<device>:`` trailers (the failure line seen there before
    the fix). Written out for a reviewer; empty when nothing was recorded."""
    message = parse_message(patch)
    lines: list[str] = []
    for key, value in message.all_trailers:
        if key.startswith("Evidence-"):
            lines.append(f"- {key.removeprefix('Evidence-')}, before the fix: {value}")
    entry = _verify_entry(verify, patch) if verify is not None else None
    if entry is None:
        return "\n".join(lines)
    torch = verify.get("torch", "?") if isinstance(verify, dict) else "?"
    tests = entry.get("tests") if isinstance(entry, dict) else None
    if not isinstance(tests, list) or not all(isinstance(t, dict) for t in tests):
        return "\n".join(lines)
    lines.append(f"Runs of the test file on torch {torch}, without and with this change:")
    for test in tests:
        lines.append(f"- `{test.get('file', '?')}`")
        for key, label in (
            ("stock_neuron", "stock torch on a PrivateUse1 backend (must fail)"),
            ("patched_neuron", "with the patch (must pass)"),
            ("stock_openreg", "stock torch on OpenReg (must fail)"),
            ("patched_openreg", "OpenReg with the patch (must pass)"),
            ("stock_cpu", "CPU, before"),
            ("patched_cpu", "CPU, after"),
        ):
            run = test.get(key)
            if isinstance(run, dict) and run.get("outcome") != "not run":
                failing = run.get("failing") or []
                extra = f" ({'; '.join(map(str, failing[:4]))})" if failing else ""
                lines.append(f"  - {label}: {run.get('summary', run.get('outcome', '?'))}{extra}")
    lines.append(f"- verdict: {entry.get('verdict', '?')}")
    return "\n".join(lines)


def _related(value: str) -> str:
    """``pytorch/pytorch#123 (open) fixes the same call`` as a Markdown line naming the link."""
    match = re.match(r"\s*(?:pytorch/pytorch)?#(\d+)\s*(\(([^)]*)\))?\s*(.*)$", value)
    if match is None:
        return value
    number, _, state, relation = match.groups()
    state = f" ({state})" if state else ""
    return f"#{number}{state}" + (f": {relation}" if relation else "")


def _upstream_state(message: Message, titles: dict[str, str] | None = None) -> str:
    """What was found upstream, from the trailers (checked in pytorch/pytorch's issues/PRs)."""
    bug = message.trailers.get("Bug", "none")
    forwarded = message.trailers.get("Forwarded", "no")
    applied = message.trailers.get("Applied-Upstream", "no")
    lines = [
        f"- Issue: {bug if bug.lower() != 'none' else 'no upstream issue found'}",
        f"- Open upstream PR carrying it: "
        f"{forwarded if forwarded.lower() != 'no' else 'none found'}",
        f"- Already upstream: {applied if applied.lower() != 'no' else 'no'}",
    ]
    lines += [f"- Related PR {_related(v)}" for v in message.values("Related-PR")]
    lines += [f"- Related issue {_related(v)}" for v in message.values("Related-Issue")]
    searched = message.trailers.get("Upstream-Searched")
    if searched:
        lines.append(f"- Open PRs and issues searched on {searched}")
    for needed in depends_on(message):
        title = (titles or {}).get(needed)
        named = f'the PR "{title}"' if title else needed
        lines.append(f"- Stacked on {named}, which must land first")
    return "\n".join(lines)


def _says_behaviour(paragraph: str) -> bool:
    """Whether a body paragraph says what behaviour changes (or stays) for whom."""
    return (
        re.search(r"behaviou?r|BC-breaking|unchanged|what changes", paragraph, re.IGNORECASE)
        is not None
    )


_ABBREVIATIONS = ("e.g.", "i.e.", "cf.", "etc.", "vs.", "resp.")


def ends_sentence(paragraph: str) -> bool:
    """Whether a paragraph ends a sentence (not on ``:`` or an abbreviation such as ``e.g.``);
    an indented block (code, an error message) is ended by what follows it."""
    text = paragraph.rstrip()
    if paragraph.startswith("    "):
        return True
    if text.endswith(_ABBREVIATIONS):
        return False
    return re.search(r"[.!?][)\"'`*_]*$", text) is not None


def starts_sentence(paragraph: str) -> bool:
    """Whether a paragraph can begin a sentence: not an indented continuation (a block belongs
    to the sentence that introduces it) and not lower case."""
    if paragraph.startswith((" ", "\t")):
        return False
    first = paragraph.lstrip("`*_\"'([")[:1]
    return not first.islower()


def sentence_units(paragraphs: tuple[str, ...] | list[str]) -> list[str]:
    """The paragraphs joined wherever a sentence runs on across a blank line (``... e.g.``,
    a block, ``so ...``): a section may start or end only at a unit's edge."""
    units: list[list[str]] = []
    for paragraph in paragraphs:
        if units and not (ends_sentence(units[-1][-1]) and starts_sentence(paragraph)):
            units[-1].append(paragraph)
        else:
            units.append([paragraph])
    return ["\n\n".join(unit) for unit in units]


def _behaviour_changes(units: list[str]) -> str:
    """The body's units that say what behaviour changes (or stays) for whom."""
    said = [u for u in units[1:] if _says_behaviour(u)]
    return "\n\n".join(said) or (
        "(the patch body states no behaviour change: say what changes on CPU, CUDA, MPS, XPU "
        "and other accelerators before opening the PR)"
    )


def _devices(patch: Patch, verify: object | None) -> str:
    """On which devices or mocks the test fails before the fix, from the verify JSON; empty
    without one."""
    entry = _verify_entry(verify, patch) if verify is not None else None
    tests = entry.get("tests") if isinstance(entry, dict) else None
    if not isinstance(tests, list):
        return ""

    def failed(key: str) -> bool:
        return any(
            isinstance(t, dict) and (t.get(key) or {}).get("outcome") == "failed" for t in tests
        )

    without = sorted(
        {
            str(name).split(": ", 1)[-1].rsplit(".", 1)[0]
            for t in tests
            if isinstance(t, dict)
            for name in (t.get("stock_cpu") or {}).get("failing") or []
        }
    )
    lines = ["Fails before the fix on:"]
    if without:
        lines.append(
            "- stock torch without any accelerator backend (what upstream's CPU CI runs): "
            + ", ".join(f"`{name}`" for name in without)
            + " (a class named ...Mock pretends the trait it names; see its docstring)"
        )
    # A ...Mock class fails on any build: OpenReg is named only when a test of its device fails.
    openreg = [
        str(name)
        for t in tests
        if isinstance(t, dict) and (t.get("stock_openreg") or {}).get("outcome") == "failed"
        for name in t["stock_openreg"].get("failing") or []
    ]
    mocks_only = bool(openreg) and all(is_mock(name) for name in openreg)
    if failed("stock_openreg") and not mocks_only:
        on_device = sorted({failing_class(name) for name in openreg if not is_mock(name)})
        lines.append(
            "- the OpenReg device (PyTorch's in-tree PrivateUse1 test backend)"
            + (": " + ", ".join(f"`{name}`" for name in on_device) if on_device else "")
        )
    if failed("stock_neuron"):
        lines.append("- a PrivateUse1 backend (the out-of-tree reference backend `neuron`)")
    if len(lines) == 1:
        lines.append("- nothing: the test does not fail before the fix (not ready)")
    if mocks_only:
        classes = ", ".join(f"`{name}`" for name in sorted({failing_class(n) for n in openreg}))
        lines.append(
            f"\nOn OpenReg, PyTorch's in-tree PrivateUse1 test backend, only mock classes fail "
            f"before the fix ({len(openreg)} test{'s' if len(openreg) != 1 else ''}: {classes}); "
            "a mock fails on any build, so this is no failure of the OpenReg device."
        )
    return "\n".join(lines)


def body_markdown(
    patch: Patch,
    verify: object | None = None,
    verify_path: Path | None = None,
    titles: dict[str, str] | None = None,
) -> str:
    """body.md in the shape of PyTorch's pull-request template.

    ``titles`` maps patch file names to their PR titles (a stacked PR names the one it needs).
    No section starts or ends inside a sentence (see :func:`sentence_units`).
    """
    del verify_path  # the body says what the runs showed, not where the file was
    message = parse_message(patch)
    units = sentence_units(message.paragraphs)
    summary = units[0] if units else message.subject
    # What the body says of behaviour has its own section; the rest is the details.
    details = "\n\n".join(u for u in units[1:] if not _says_behaviour(u))
    bc = next(
        (
            line.split(":", 1)[1].strip()
            for p in message.paragraphs
            for line in p.splitlines()
            if line.lower().startswith("bc-breaking:")
        ),
        "none",
    )
    plan = message.test_plan or "(the patch body has no test plan)"
    for fold in suite_folds(patch):  # upstream, the test is part of the suite it names
        summary, details, plan = (
            text.replace(fold.new, fold.suite) for text in (summary, details, plan)
        )
    parts = [_fixes_line(message), "## Summary", summary]
    if details:
        parts += ["### Details", details]
    parts += [
        "## Upstream state",
        _upstream_state(message, titles),
        "## Behaviour changes",
        _behaviour_changes(units),
        "## Test plan",
        plan,
    ]
    parts += [text for text in (_devices(patch, verify), _evidence(patch, verify)) if text]
    parts += ["## BC-breaking", f"BC-breaking: {bc}"]
    links = [f"- {k}: {message.trailers[k]}" for k in TRAILER_KEYS if k in message.trailers]
    if links:
        parts += ["## Related", "\n".join(links)]
    parts += [
        "## Labels",
        "Suggested labels (for a maintainer to apply): "
        + ", ".join(f"`{label}`" for label in labels(message)),
        "## How this change was produced",
        "This change was produced with AI assistance (the code change, its test and this "
        "description). A person reviewed the change, the test and the fail-before/pass-after "
        "evidence before submission and is responsible for it, as PyTorch's contribution "
        "policy on generated code requires; the pull request stays a draft until then.",
        f"Reviewed by: {REVIEWER_PLACEHOLDER}",
    ]
    return "\n\n".join(parts) + "\n"


def commands_script(patch: Patch, folder: Path, remote: str, head_owner: str | None) -> str:
    """commands.sh: the exact push and draft-PR commands. Written, never run. No ``--label``:
    outside contributors cannot set labels; body.md suggests them."""
    branch = branch_name(patch)
    head = f"{head_owner}:{branch}" if head_owner else branch
    push = ["git", "push", remote, branch]
    create = [
        "gh", "pr", "create", "--draft", "--repo", "pytorch/pytorch",
        "--title", parse_message(patch).subject,
        "--body-file", str(folder / "body.md"),
        "--base", "main", "--head", head,
    ]  # fmt: skip
    guard = shlex.join(["grep", "-qF", REVIEWER_PLACEHOLDER, str(folder / "body.md")])
    return (
        "#!/usr/bin/env bash\n"
        "# Written by `scripts/patches export`; never run by it. Review body.md first.\n"
        "# Run from the PyTorch checkout the branch was made in.\n"
        "set -euo pipefail\n"
        f"if {guard}; then\n"
        '  echo "fill in the reviewer in body.md (How this change was produced) first" >&2\n'
        "  exit 1\n"
        "fi\n"
        f"{shlex.join(push)}\n"
        f"{shlex.join(create)}\n"
    )


def _check_inputs(series: Series, root: Path, out: Path, base: str | None) -> str:
    """The checkout (:func:`validate_checkout`, as for apply), the base commit and the output
    folder; returns the base commit's full id."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise BadInput(f"{out}: the output folder exists and is not empty")
    if base is None:
        validate_checkout(root)
        found = _git(root, "rev-parse", "--verify", "-q", f"{series.base.commit}^{{commit}}",
                     check=False)  # fmt: skip
        if found.returncode != 0:
            raise BadInput(
                f"{root}: the series' base commit {series.base.commit} (torch "
                f"{series.base.version}) is not in this checkout; fetch it, or pass --base "
                "COMMIT (e.g. origin/main) to cut the branches from another commit"
            )
        commit = found.stdout.strip()
    else:
        commit = validate_checkout(root, base)
    for patch in series.patches:
        if _branch_exists(root, branch_name(patch)):
            raise BadInput(
                f"{root}: branch {branch_name(patch)} already exists; delete it first (or run "
                "export --abort to remove what an interrupted export made)"
            )
    return commit


def _require_on_main(root: Path, commit: str, remote: str, given: str | None) -> None:
    """commands.sh opens each PR against ``main``: refuse a base that is not on the checkout's
    main (a release commit: the PR would carry the release branch's own commits)."""
    for ref in (f"refs/remotes/{remote}/main", "refs/heads/main"):
        if _git(root, "rev-parse", "--verify", "-q", ref, check=False).returncode == 0:
            break
    else:
        raise BadInput(
            f"{root}: has no main branch ({remote}/main or main) to open the PRs against; "
            f"run `git fetch {remote} main` in it"
        )
    on_main = _git(root, "merge-base", "--is-ancestor", commit, ref, check=False)
    if on_main.returncode != 0:
        what = f"--base {given}" if given else "the series' base (a release commit)"
        raise BadInput(
            f"{root}: {what} ({commit[:12]}) is not on {ref.split('/', 2)[-1]}: a PR against "
            "main from it would carry the release branch's commits. Update main (git fetch "
            f"{remote} main) and export with --base {remote}/main; if a patch does not apply "
            "there, carry the series over first (scripts/patches refresh --onto CHECKOUT)"
        )


def _missing_suites(series: Series, read: Callable[[str], bytes | None], root: Path,
                    commit: str) -> None:  # fmt: skip
    """Raise BadInput when a patch's ``Upstream-Test:`` suite is not in the checkout at the base,
    naming the closest path that is."""
    wanted = [(p, f) for p in series.patches for f in suite_folds(p) if read(f.suite) is None]
    if not wanted:
        return
    tests = _git(root, "ls-tree", "-r", "--name-only", commit, "--", "test").stdout.split()
    lines = []
    for patch, fold in wanted:
        name = fold.suite.rsplit("/", 1)[-1]
        same = [t for t in tests if t.rsplit("/", 1)[-1] == name]
        close = same or difflib.get_close_matches(fold.suite, tests, n=1, cutoff=0.6)
        hint = f"; the closest existing path is {close[0]}" if close else ""
        lines.append(
            f"{patch.name}: Upstream-Test names {fold.suite}, which does not exist at "
            f"{commit[:12]}{hint}"
        )
    raise BadInput("\n".join([*lines, "correct the Upstream-Test trailers (the patch files)"]))


def _base_reader(root: Path, commit: str):
    def read(path: str) -> bytes | None:
        result = subprocess.run(
            ["git", "-C", str(root), "show", f"{commit}:{path}"], capture_output=True, check=False
        )
        return result.stdout if result.returncode == 0 else None

    return read


def _check_applies(series: Series, root: Path, stack: bool, needs: dict[str, list[Patch]]) -> None:
    """Zero-fuzz dry run on the base: the whole series (stacked) or each patch alone on the
    base with the patches it depends on."""
    read = _base_reader(root, series.base.commit)
    groups = [series.patches] if stack else [(*needs[p.name], p) for p in series.patches]
    for group in groups:
        plan = plan_series(Series(series.directory, series.base, group), read, lambda _: "target")
        for outcome in plan.outcomes:
            if outcome.state == "applies":
                continue
            how = "in the stacked series" if stack else "alone on the base (depends on another?)"
            hint = (
                ""
                if stack
                else "; name the patch it needs in a Depends-On: trailer, or export with --stack"
            )
            raise Conflict(
                f"{outcome.patch.name}: does not apply {how}{hint}\n{outcome.describe()}"
            )


EXPORT_RECORD = "device-agnostic-export.json"


def _export_record_path(root: Path) -> Path:
    return git_dir(root) / EXPORT_RECORD


def _write_export_record(root: Path, record: dict) -> None:
    data = (json.dumps(record, indent=2) + "\n").encode("utf-8")
    fsops.write_file(_export_record_path(root), data, 0o644)


def recover_export(checkout: Path) -> list[str]:
    """Remove what an export that was killed made (its record in the checkout's git folder
    lists it: branches, the temporary worktree and folder, the output folder it created); lines
    saying what was removed, none when no export was interrupted."""
    root = Path(checkout).resolve()
    if not (root / ".git").exists():
        return []
    path = _export_record_path(root)
    leftover = fsops.temporary_name(path)
    if leftover.exists():
        fsops.remove_file(leftover)
    if not path.exists():
        return []
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BadInput(
            f"{path}: unreadable ({exc}); this tool writes it whole, so something else changed "
            "it; delete the device-agnostic/ branches by hand and the file"
        ) from exc
    _git(root, "worktree", "remove", "--force", record["worktree"], check=False)
    shutil.rmtree(record["tmp"], ignore_errors=True)
    _git(root, "worktree", "prune", check=False)
    deleted = [b for b in record["branches"] if _branch_exists(root, b)]
    for branch in deleted:
        _git(root, "branch", "-q", "-D", branch)
    out = Path(record["out"])
    if record["created_out"] and out.exists():
        shutil.rmtree(out, ignore_errors=True)
    elif out.is_dir():  # it was empty when the export started: all in it is the export's
        for child in out.iterdir():
            shutil.rmtree(child) if child.is_dir() else child.unlink()
    fsops.remove_file(path)
    return [
        f"recovered: an interrupted export was cleaned up: {len(deleted)} branches deleted "
        f"({', '.join(deleted) or 'none'}), its temporary worktree removed"
        + (f", {out} removed" if record["created_out"] else "")
    ]


def export(
    series: Series,
    checkout: Path,
    out: Path,
    *,
    stack: bool = False,
    verify_json: Path | None = None,
    remote: str = "origin",
    head_owner: str | None = None,
    author: str | None = None,
    base: str | None = None,
) -> list[str]:
    """Make the branches and the folders of the forward queue; returns the lines to print.

    The branches start from ``base`` (a commit or ref of the checkout, e.g. ``origin/main``),
    by default from the series' base; it must be on the checkout's main, which the PRs target.

    Raises BadInput (not a checkout, dirty, no base commit, output folder not empty, branch
    exists, unreadable verify JSON, no or a placeholder author, a Depends-On that is not an
    earlier exported patch) or Conflict (a patch does not apply); the checkout and the output
    folder are then as before.
    """
    root = Path(checkout).resolve()
    out = Path(out).resolve()
    if not root.is_dir():
        raise BadInput(f"{root}: not a directory")
    notes = recover_export(root)
    skipped = {p.name: why for p in series.patches if (why := is_backport(parse_message(p)))}
    forward = [p for p in series.patches if p.name not in skipped]
    needs = _dependencies(forward, skipped)
    commit = _check_inputs(Series(series.directory, series.base, forward), root, out, base)
    _require_on_main(root, commit, remote, base)
    if base is not None:  # the branches start from the commit given; the version is its name
        series = Series(series.directory, Base(base, commit), forward)
    else:
        series = Series(series.directory, Base(series.base.version, commit), forward)
    _missing_suites(series, _base_reader(root, commit), root, commit)
    name, email = author_identity(root, author)
    verify = None
    if verify_json is not None:
        try:
            verify = json.loads(Path(verify_json).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise BadInput(f"{verify_json}: cannot read the verify JSON: {exc}") from exc
    _check_applies(series, root, stack, needs)
    findings = folded_suite_lint(series, _base_reader(root, series.base.commit))
    if findings:
        raise BadInput(
            "the folded suites would fail PyTorch's lint (PYFMT, ruff check); fix the tests "
            "(see `scripts/patches lint --pytorch CHECKOUT`):\n"
            + "\n".join(f.describe() for f in findings)
        )
    made: list[str] = []
    ok = False
    created_out = not out.exists()
    worktree = Path(tempfile.mkdtemp(prefix="patches-export-")) / "tree"
    # What this run makes, written before it makes it: a killed export is cleaned up by the
    # next one (or export --abort).
    record = {
        "worktree": str(worktree),
        "tmp": str(worktree.parent),
        "out": str(out),
        "created_out": created_out,
        "branches": made,
    }
    _write_export_record(root, record)
    try:
        _git(root, "worktree", "add", "-q", "--detach", str(worktree), series.base.commit)
        identity = ["-c", f"user.name={name}", "-c", f"user.email={email}"]
        for patch in series.patches:
            branch = branch_name(patch)
            if stack:
                start = "HEAD"
            elif needs[patch.name]:
                start = branch_name(needs[patch.name][-1])
            else:
                start = series.base.commit
            made.append(branch)
            _write_export_record(root, record)
            _git(worktree, "checkout", "-q", "-b", branch, start)
            am = subprocess.run(
                ["git", "-C", str(worktree), *identity, "am", "-3", "-k", "--quiet",
                 str(patch.path)],
                capture_output=True,
                text=True,
                check=False,
            )  # fmt: skip
            if am.returncode != 0:
                _git(worktree, "am", "--abort", check=False)
                raise Conflict(
                    f"{patch.name}: git am -3 -k failed; every branch this export made is "
                    f"deleted:\n{am_output(am.stdout, am.stderr)}".rstrip()
                )
            # The patch file's From: is the series' maintainers; the PR's commit is the
            # exporting person's, whom the CLA check looks up.
            _git(worktree, *identity, "commit", "-q", "--amend", "--no-edit", "--reset-author")
            _fold_tests(worktree, patch, identity)
        lines = []
        titles = {p.name: p.subject for p in series.patches}
        for patch in series.patches:
            folder = out / topic(patch)
            folder.mkdir(parents=True)
            message = parse_message(patch)
            (folder / "title.txt").write_text(message.subject + "\n", encoding="utf-8")
            (folder / "body.md").write_text(
                body_markdown(patch, verify, verify_json, titles), encoding="utf-8"
            )
            (folder / "labels.txt").write_text("\n".join(labels(message)) + "\n", "utf-8")
            script = folder / "commands.sh"
            script.write_text(commands_script(patch, folder, remote, head_owner), "utf-8")
            script.chmod(0o755)
            commit = _git(root, "rev-parse", "--short", branch_name(patch)).stdout.strip()
            lines.append(f"{patch.name}: branch {branch_name(patch)} ({commit}), {folder}")
            if not _evidence(patch, verify):
                lines.append(
                    f"{patch.name}: body.md records no fail-before run (no Evidence-* trailer, "
                    "no --verify-json): add the evidence before opening the PR"
                )
        ok = True
    finally:
        # The worktree first: git refuses to delete a branch checked out in one.
        removed = _git(root, "worktree", "remove", "--force", str(worktree), check=False)
        shutil.rmtree(worktree.parent, ignore_errors=True)
        if removed.returncode != 0:
            _git(root, "worktree", "prune", check=False)
        if not ok:
            for branch in made:
                if _branch_exists(root, branch):
                    _git(root, "branch", "-q", "-D", branch, check=False)
            if created_out:
                shutil.rmtree(out, ignore_errors=True)
            elif out.is_dir():
                for child in out.iterdir():
                    shutil.rmtree(child) if child.is_dir() else child.unlink()
        fsops.remove_file(_export_record_path(root))
    lines = notes + lines
    how = "stacked, each on the previous" if stack else f"each on the base {series.base.short}"
    lines += [f"{patch}: not exported: {why}" for patch, why in skipped.items()]
    lines.append(
        f"exported {len(series.patches)} patches ({how}; authored by {name} <{email}>), "
        f"{len(skipped)} backports left out; nothing was pushed. Review each body.md, then run "
        "its commands.sh to push and open a draft PR."
    )
    return lines


def suite_folds(patch: Patch) -> list[Fold]:
    """The patch's added test files and the upstream suites they go into (Upstream-Test:)."""
    trailer = parse_message(patch).trailers.get("Upstream-Test", "")
    added = [f.path for f in patch.files if f.status == "added" and f.path.startswith("test/")]
    return folds(trailer, added) if trailer else []


def folded_suite_lint(series: Series, read: Callable[[str], bytes | None]) -> list[Finding]:
    """Fold every patch's tests into their suites in memory (each patch on the series applied
    to ``read``'s files, as export makes it) and lint each folded suite against the suite as it
    was: the PYFMT and ruff findings the folds add. Raises BadInput when a suite is missing."""
    plan = plan_series(series, read, lambda _: "target")
    rounds: list[tuple[dict[str, str | None], dict[str, str]]] = []
    for patch in series.patches:
        for fold in suite_folds(patch):
            suite = plan.original.get(fold.suite)
            if suite is None:
                suite = read(fold.suite)
            new = plan.files.get(fold.new)
            if suite is None or new is None:
                continue  # reported by export's own checks (missing_suites)
            before = suite.decode("utf-8")
            after = fold_test(new.decode("utf-8"), before, fold.new, fold.suite)
            # A suite several patches fold into is linted once per fold, in separate rounds.
            free = [r for r in rounds if fold.suite not in r[1]]
            if not free:
                rounds.append(({}, {}))
                free = rounds[-1:]
            free[0][0][fold.suite] = before
            free[0][1][fold.suite] = after
    found: list[Finding] = []
    for old, folded in rounds:
        for result in lint_texts(old, folded).values():
            found += result.findings
    return found


def lint_folds(series: Series, checkout: Path, base: str | None = None) -> list[Finding]:
    """``lint --pytorch``: the forward queue's tests folded into their suites of ``checkout`` at
    ``base`` (default: the series' base), linted as export lints them."""
    root = Path(checkout).resolve()
    commit = validate_checkout(root, base or series.base.commit)
    forward = [p for p in series.patches if not is_backport(parse_message(p))]
    folded = Series(series.directory, Base(series.base.version, commit), tuple(forward))
    read = _base_reader(root, commit)
    _missing_suites(folded, read, root, commit)
    return folded_suite_lint(folded, read)


def _fold_tests(worktree: Path, patch: Patch, identity: list[str]) -> None:
    """Amend the patch's commit so that its new test files are hunks of the upstream suites."""
    plan = suite_folds(patch)
    if not plan:
        return
    message = _git(worktree, "log", "-1", "--format=%B").stdout
    for fold in plan:
        suite = worktree / fold.suite
        if not suite.is_file():
            raise Conflict(
                f"{patch.name}: Upstream-Test names {fold.suite}, which the checkout does not "
                "have at the base: correct the trailer"
            )
        new = worktree / fold.new
        folded = fold_test(
            new.read_text(encoding="utf-8"), suite.read_text(encoding="utf-8"), fold.new,
            fold.suite,
        )  # fmt: skip
        suite.write_text(folded, encoding="utf-8")
        _git(worktree, "rm", "-q", fold.new)
        _git(worktree, "add", fold.suite)
        message = message.replace(fold.new, fold.suite)
    _git(
        worktree, *identity, "commit", "-q", "--amend", "--no-verify", "--message",
        message.rstrip("\n"),
    )  # fmt: skip


def _dependencies(forward: list[Patch], skipped: dict[str, str]) -> dict[str, list[Patch]]:
    """Per exported patch, the earlier exported patches it needs (``Depends-On:``, with what
    those need), in series order; its branch starts from the last one's."""
    seen: dict[str, Patch] = {}
    result: dict[str, list[Patch]] = {}
    for patch in forward:
        names = depends_on(parse_message(patch))
        for needed in names:
            if needed not in seen:
                why = (
                    f"it is not exported ({skipped[needed]})"
                    if needed in skipped
                    else "it is not an earlier patch of the series"
                )
                raise BadInput(f"{patch.name}: Depends-On {needed}, but {why}")
        closure: list[Patch] = []
        for needed in names:  # with what the needed patch itself needs, in series order
            for item in (*result[needed], seen[needed]):
                if item not in closure:
                    closure.append(item)
        order = {p.name: i for i, p in enumerate(forward)}
        result[patch.name] = sorted(closure, key=lambda p: order[p.name])
        seen[patch.name] = patch
    return result
