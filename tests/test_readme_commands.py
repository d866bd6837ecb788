"""Every command the README gives names something that exists: a Make target of the Makefile, a
Python module of the repository, a file or folder of the checkout. The commands are read, never run.

Commands come from the README's shell code blocks (every line, `\\` continuations joined) and
from inline code that starts with `make ` or `.venv/bin/python -m `. The output the README shows
for `make sharing` is the tool's own, run on the fake lab."""

from __future__ import annotations

import io
import json
import re
import shlex
from pathlib import Path

import pytest
import yaml

from labcheck.sharing import main as sharing_main
from tests.support.labcheck_fakes import hami_pod, standard_lab
from tests.support.pulumi_harness import PROJECT_DIR

SHELL_BLOCK = re.compile(r"^```(?:bash|sh|shell|console)\n(.*?)^```", re.M | re.S)
INLINE = re.compile(r"(?<!`)`((?:make |\.venv/bin/python -m )[^`]+)`(?!`)")
PLACEHOLDER = re.compile(r"[<>$*]|\.\.\.|…")
SEPARATORS = {"&&", "||", ";", "|", "(", ")"}
REDIRECTS = {"<", ">", ">>", "2>", "2>&1"}
# Where a command's output goes: what the user's run creates, never in a fresh clone.
OUTPUT_OPTIONS = {"--report-dir", "-o", "--output"}
OUTPUT_DIRS = ("reports/", "kubeconfigs/", "mutants/", ".cache/")


def make_targets(makefile: str) -> set[str]:
    """Rule names (`name:` at the start of a line), not `VAR :=` assignments."""
    return set(re.findall(r"^([A-Za-z0-9][\w.-]*)[ \t]*:(?!=)", makefile, re.M))


def readme_commands(text: str) -> list[str]:
    commands = []
    for block in SHELL_BLOCK.findall(text):
        joined = re.sub(r"\\\n", " ", block)
        commands += [line.strip() for line in joined.splitlines()]
    commands += [" ".join(span.split()) for span in INLINE.findall(text)]
    return [c for c in (strip_comment(c) for c in commands) if c]


def strip_comment(line: str) -> str:
    return re.split(r"(?:^|\s)#", line, maxsplit=1)[0].strip()


def words(command: str) -> list[str]:
    lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|()")
    lexer.whitespace_split = True
    return list(lexer)


def simple_commands(command: str) -> list[list[str]]:
    """The command split at `&&`, `;`, pipes and parentheses; a leading `VAR=value` dropped."""
    out: list[list[str]] = [[]]
    for word in words(command):
        if word in SEPARATORS:
            out.append([])
        else:
            out[-1].append(word)
    result = []
    for argv in out:
        while argv and re.fullmatch(r"[A-Za-z_]\w*=.*", argv[0]):
            argv = argv[1:]
        if argv:
            result.append(argv)
    return result


def is_module(name: str, root: Path) -> bool:
    path = root.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def looks_like_repo_path(word: str) -> bool:
    if PLACEHOLDER.search(word) or word.startswith(("-", "/", "~", "http:", "https:")):
        return False
    return "/" in word or bool(re.search(r"\.(?:py|ya?ml|json|toml|md|png)$", word))


def path_problem(word: str, root: Path) -> str | None:
    wanted = looks_like_repo_path(word) and not word.startswith(OUTPUT_DIRS)
    return f"no file or folder {word}" if wanted and not (root / word).exists() else None


def problems(command: str, root: Path, targets: set[str]) -> list[str]:
    """What the command names that the checkout does not have (empty: all there)."""
    found = []
    for argv in simple_commands(command):
        program, args = argv[0], argv[1:]
        skip_next = False
        checked: list[str] = []
        for i, word in enumerate(args):
            if skip_next:
                skip_next = False
                continue
            if word in REDIRECTS or word in OUTPUT_OPTIONS:
                skip_next = True
                continue
            if program == "make":
                if word.startswith("-"):
                    continue
                if "=" in word:
                    checked.append(word.split("=", 1)[1])
                elif word not in targets:
                    found.append(f"no Make target {word!r}")
            elif program.endswith("python") and word == "-m" and i + 1 < len(args):
                module = args[i + 1]
                if not is_module(module, root):
                    found.append(f"no Python module {module!r}")
                skip_next = True
            else:
                checked.append(word)
        if program.startswith(("./", ".venv/")) and not (root / program).exists():
            found.append(f"no program {program}")
        found += [p for p in (path_problem(word, root) for word in checked) if p]
    return found


README = (PROJECT_DIR / "README.md").read_text()
TARGETS = make_targets((PROJECT_DIR / "Makefile").read_text())


def test_the_readme_has_commands_to_check():
    commands = readme_commands(README)
    assert any(c.startswith("make ") for c in commands)
    assert any(c.startswith(".venv/bin/python -m ") for c in commands)


@pytest.mark.parametrize("command", readme_commands(README))
def test_each_readme_command_names_what_exists(command: str):
    assert problems(command, PROJECT_DIR, TARGETS) == []


SYNTHETIC = """# a project

```bash
PULUMI_CONFIG_PASSPHRASE='x' make up   # fine
make no-such-target STACK=lab
kubectl apply -f examples/no-such-pod.yaml
.venv/bin/python -m no_such_module --stack lab
```

Then run `make up STACK=nvml` or `make bogus-target`, and `.venv/bin/python -m labcheck --list`.
"""


def test_the_check_fails_for_what_does_not_exist():
    commands = readme_commands(SYNTHETIC)
    assert commands == [
        "PULUMI_CONFIG_PASSPHRASE='x' make up",
        "make no-such-target STACK=lab",
        "kubectl apply -f examples/no-such-pod.yaml",
        ".venv/bin/python -m no_such_module --stack lab",
        "make up STACK=nvml",
        "make bogus-target",
        ".venv/bin/python -m labcheck --list",
    ]
    found = {c: problems(c, PROJECT_DIR, TARGETS) for c in commands}
    assert found == {
        "PULUMI_CONFIG_PASSPHRASE='x' make up": [],
        "make no-such-target STACK=lab": ["no Make target 'no-such-target'"],
        "kubectl apply -f examples/no-such-pod.yaml": [
            "no file or folder examples/no-such-pod.yaml"
        ],
        ".venv/bin/python -m no_such_module --stack lab": ["no Python module 'no_such_module'"],
        "make up STACK=nvml": [],
        "make bogus-target": ["no Make target 'bogus-target'"],
        ".venv/bin/python -m labcheck --list": [],
    }


def test_paths_in_make_variables_and_outputs():
    assert problems("make capacity MIX=capacity/mixes/nope.yaml", PROJECT_DIR, TARGETS) == [
        "no file or folder capacity/mixes/nope.yaml"
    ]
    assert problems("make capacity MIX=capacity/mixes/cannot-fit.yaml", PROJECT_DIR, TARGETS) == []
    # What a run writes is not in a fresh clone, and placeholders name nothing.
    assert (
        problems(
            ".venv/bin/python -m labcheck --stack lab --report-dir reports/lab",
            PROJECT_DIR,
            TARGETS,
        )
        == []
    )
    assert (
        problems("pulumi config set --secret sshPrivateKey < ~/.ssh/id", PROJECT_DIR, set()) == []
    )
    assert problems("kubectl apply -f examples/<file>.yaml", PROJECT_DIR, TARGETS) == []


def test_make_targets_are_rules_not_assignments():
    makefile = "STATE_DIR := x\nVENV ?= .venv\nup: up-ready $(VENV)/.installed\n\tpulumi up\n"
    assert make_targets(makefile) == {"up"}


def test_the_readme_shows_what_make_sharing_prints_after_examples_1_and_2(tmp_path, monkeypatch):
    """The README's `make sharing` text is the tool's own output (its time left out) for the
    pods of examples/1 and examples/2 as HAMi places them on the lab stack's cards, from the
    fake lab's API servers: no pod the examples do not create."""
    section = README[README.index("### See the sharing") :]
    shown = re.search(r"^```\n(GPU sharing in stack lab, .*?)^```", section, re.M | re.S)
    assert shown, "no `make sharing` output under See the sharing"
    lab = standard_lab()
    for name, tenant in [
        ("1-four-pods-share-one-a100.yaml", "tenant-a"),
        ("2-one-pod-on-both-l4.yaml", "tenant-b"),
    ]:
        node = f"{tenant}-worker-1"
        for pod in yaml.safe_load_all((PROJECT_DIR / "examples" / name).read_text()):
            limits = pod["spec"]["containers"][0]["resources"]["limits"]
            mem, cores = limits["nvidia.com/gpumem"], limits.get("nvidia.com/gpucores", 0)
            cards = range(int(limits["nvidia.com/gpu"]))
            slices = ":".join(f"GPU-{node}-{i},NVIDIA,{mem},{cores}" for i in cards) + ":;"
            lab.tenant(tenant).add_placed_pod(
                hami_pod(pod["metadata"]["namespace"], pod["metadata"]["name"], node, slices)
            )
    (tmp_path / "spec.json").write_text(json.dumps(lab.spec))
    monkeypatch.chdir(tmp_path)  # `make sharing` passes --report-dir reports/<stack>
    out = io.StringIO()
    argv = ["--spec", "spec.json", "--report-dir", "reports/lab"]
    assert sharing_main(argv, out=out, factory=lab.factory, when="<time>") == 0
    assert out.getvalue() == shown.group(1)
