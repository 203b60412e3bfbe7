"""Every release tag of the SGLang stand-in's git repository (`llmops-sim/sglang-standin.git`, made by
sim/mirrors/git_sources.py) builds as the release it names, checked out and built the way roles/sglang does it, and
the build serves as that release.

The way the role does it, read from the role where it can be: the ref is resolved with the `git ls-remote` argv of
tasks/main.yml and plugins/module_utils/build_plan.resolve_ref, the checkout is ansible.builtin.git with the arguments
of tasks/build.yml's checkout task (a `depth` or `single_branch` added there runs here too), described with
files/sglang_describe.py, and the wheel is built as roles/python_env/templates/build.sh.j2 builds it (`pip wheel
--no-build-isolation --no-deps` in python/) with the SETUPTOOLS_SCM_OVERRIDES_FOR_SGLANG of tasks/build.yml. The
build tools are the ones the simulated nodes' package index serves (SIM_EXTRA_WHEELS of sim/node), installed into a
throwaway venv.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import urllib.request
import zipfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles" / "sglang"
DESCRIBE = ROLE / "files" / "sglang_describe.py"
BUILD_SH = ROOT / "roles" / "python_env" / "templates" / "build.sh.j2"
sys.path.insert(0, str(ROOT / "sim" / "mirrors"))

import git_sources  # noqa: E402

from ansible_collections.llmops.sglang.plugins.module_utils.build_plan import resolve_ref  # noqa: E402

RELEASE_TAG = re.compile(r"^v(\d+(?:\.\d+)+(?:\.post\d+)?)$")
# The build tools of the nodes' index that a setuptools-scm build of the stand-in uses (sim/node, SIM_EXTRA_WHEELS).
BUILD_TOOLS = ("setuptools", "wheel", "setuptools-scm", "packaging", "typing-extensions")
READY = "The server is fired up and ready to roll!"
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def git_env(home: Path) -> dict:
    return {
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "HOME": str(home),
        "PATH": os.environ["PATH"],
        "LANG": "C.UTF-8",
    }


def run(argv, cwd, env, what):
    proc = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, f"{what} failed ({proc.returncode}): {(proc.stdout + proc.stderr).strip()[-2000:]}"
    return proc.stdout


def scm_version(python, cwd, env) -> str:
    """What `python -m setuptools_scm` reads in the checkout's python/ (its pyproject's config), or why it read none."""
    proc = subprocess.run(
        [str(python), "-m", "setuptools_scm"], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    if proc.returncode == 0:
        return proc.stdout.strip()
    out = (proc.stdout + proc.stderr).strip()
    return f"no version ({out.splitlines()[-1] if out else proc.returncode})"


def task(path: Path, name: str) -> dict:
    found = [t for t in yaml.safe_load(path.read_text()) if t.get("name") == name]
    assert len(found) == 1, f"expected one task named {name!r} in {path}; found {len(found)}"
    return found[0]


def node_build_tools() -> list[str]:
    m = re.search(r"^SIM_EXTRA_WHEELS=\$\{SIM_EXTRA_WHEELS:-([^}]*)\}", (ROOT / "sim" / "node").read_text(), re.M)
    assert m, "sim/node has no SIM_EXTRA_WHEELS default"
    pins = {p.split("==")[0]: p for p in m.group(1).split()}
    missing = [t for t in BUILD_TOOLS if t not in pins]
    assert not missing, f"sim/node's SIM_EXTRA_WHEELS has no pin for {missing}"
    return [pins[t] for t in BUILD_TOOLS]


def ls_remote_argv(url: str, ref: str) -> list[str]:
    argv = task(ROLE / "tasks" / "main.yml", "Resolve the SGLang ref to a commit on the build host")[
        "ansible.builtin.command"
    ]["argv"]
    subst = {"{{ sglang_repo_url }}": url, "{{ sglang_version }}": ref, "{{ sglang_version }}^{}": ref + "^{}"}
    return [subst.get(a, a) for a in argv]


def checkout_args(url: str, commit: str, dest: Path) -> dict:
    args = dict(task(ROLE / "tasks" / "build.yml", "Check out SGLang at the resolved commit")["ansible.builtin.git"])
    subst = {"repo": url, "version": commit, "dest": str(dest)}
    templated = sorted(k for k, v in args.items() if isinstance(v, str) and "{{" in v and k not in subst)
    assert not templated, f"the role's checkout task has templated arguments this test does not know: {templated}"
    return args | subst


def scm_overrides(describe_command: list[str]) -> str:
    """SETUPTOOLS_SCM_OVERRIDES_FOR_SGLANG as tasks/build.yml writes it ('{git_describe_command = ' ~ to_json ~ '}')."""
    assert (
        "'{git_describe_command = ' ~ (sglang_describe_command | to_json) ~ '}'"
        in (ROLE / "tasks" / "build.yml").read_text()
    ), "tasks/build.yml no longer sets SETUPTOOLS_SCM_OVERRIDES_FOR_SGLANG as this test does"
    return "{git_describe_command = " + json.dumps(describe_command) + "}"


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    """The stand-in's repository as the mirror builds it, from a frozen copy of sim/sglang."""
    tmp = tmp_path_factory.mktemp("standin-tags")
    src = tmp / "sglang-src"
    shutil.copytree(ROOT / "sim" / "sglang", src, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    dest = tmp / "git" / "llmops-sim" / "sglang-standin.git"
    info = git_sources.build_sglang(src, tmp / "work", dest)
    return {"tmp": tmp, "url": dest.as_uri(), "info": info}


@pytest.fixture(scope="module")
def build_venv(standin):
    venv = standin["tmp"] / "build-venv"
    run([sys.executable, "-m", "venv", venv], standin["tmp"], dict(os.environ), "python -m venv")
    pins = node_build_tools()
    run(
        [venv / "bin" / "pip", "install", "-q", "--no-deps", *pins],
        standin["tmp"],
        dict(os.environ),
        f"pip install {' '.join(pins)} (the nodes' build tools)",
    )
    return venv / "bin" / "python"


@pytest.fixture(scope="module")
def builds(standin, build_venv):
    """{tag: what the role's way gives}, for every release tag the stand-in's repository carries."""
    tmp, url = standin["tmp"], standin["url"]
    env = git_env(tmp)
    listed = run(["git", "ls-remote", "--tags", url], tmp, env, "git ls-remote --tags")
    tags = sorted({line.split("\t")[1].removeprefix("refs/tags/").removesuffix("^{}") for line in listed.splitlines()})
    assert BUILD_SH.read_text().count("pip wheel --no-build-isolation --no-deps") == 1, BUILD_SH
    out = {}
    for tag in tags:
        commit = resolve_ref(run(ls_remote_argv(url, tag), tmp, env, f"git ls-remote {tag}"), tag)
        src = tmp / "src" / tag
        args_file = tmp / f"git-args-{tag}.json"
        args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": checkout_args(url, commit, src)}))
        module = json.loads(
            run([sys.executable, "-m", "ansible.modules.git", args_file], tmp, env, f"ansible.builtin.git {tag}")
        )
        scm_env = env | {"SETUPTOOLS_SCM_OVERRIDES_FOR_SGLANG": scm_overrides([sys.executable, str(DESCRIBE)])}
        describe = json.loads(run([sys.executable, DESCRIBE, "--json"], src, env, f"sglang_describe.py {tag}"))
        scm = scm_version(build_venv, src / "python", scm_env)
        upstream = scm_version(build_venv, src / "python", env)
        wheels = tmp / "wheels" / tag
        pip = [build_venv.parent / "pip", "wheel", "--no-build-isolation", "--no-deps", "--wheel-dir", wheels, "."]
        run(pip, src / "python", scm_env, f"pip wheel {tag}")
        (wheel,) = wheels.glob("sglang-*.whl")
        site = tmp / "site" / tag
        with zipfile.ZipFile(wheel) as z:
            z.extractall(site)
        (meta,) = site.glob("sglang-*.dist-info/METADATA")
        version_file = {"__version__": None}  # setuptools-scm's version_file; None: the build wrote none
        if (site / "sglang" / "_version.py").is_file():
            exec((site / "sglang" / "_version.py").read_text(), version_file)
        imported = run(
            [sys.executable, "-c", "import sglang; print(sglang.__version__)"],
            "/",
            env | {"PYTHONPATH": str(site)},
            f"import sglang ({tag})",
        ).strip()
        out[tag] = {
            "commit": commit,
            "head": run(["git", "rev-parse", "HEAD"], src, env, "git rev-parse").strip(),
            "clone_tags": run(["git", "tag"], src, env, "git tag").split(),
            "shallow": run(["git", "rev-parse", "--is-shallow-repository"], src, env, "rev-parse").strip(),
            "module_changed": module.get("changed"),
            "describe": describe["describe"],
            "scm": scm,
            "upstream_describe": upstream,
            "wheel": wheel.name,
            "metadata": re.search(r"^Version: (\S+)$", meta.read_text(), re.M).group(1),
            "version_file": version_file["__version__"],
            "import": imported,
            "site": site,
        }
    return out


def test_every_release_tag_builds_as_the_release_it_names(standin, builds):
    tags = standin["info"]["tags"]
    assert sorted(builds) == sorted(tags) and len(tags) >= 2, (sorted(builds), tags)
    assert all(RELEASE_TAG.match(t) for t in builds), sorted(builds)
    wrong = {}
    for tag, b in builds.items():
        release = RELEASE_TAG.match(tag).group(1)
        assert b["commit"] == b["head"] == tags[tag], (tag, b)
        assert b["shallow"] == "false" and sorted(b["clone_tags"]) == sorted(tags), (tag, b)  # the checkout kept tags
        got = {k: b[k] for k in ("scm", "metadata", "version_file", "import")}
        if b["describe"] != tag or set(got.values()) != {release} or b["wheel"] != f"sglang-{release}-py3-none-any.whl":
            wrong[tag] = {"describe": b["describe"], **got, "wheel": b["wheel"]}
    assert not wrong, (
        f"{len(wrong)} of the stand-in repository's {len(builds)} release tags do not build as the release they name "
        f"(checked out and built as roles/sglang does): {json.dumps(wrong, sort_keys=True)}"
    )


def test_the_standin_describes_itself_as_upstream_does_and_the_role_override_matters(builds):
    """Without the role's describe, the stand-in's own git_describe_command (upstream 0.5.9's: the highest tag) names
    the newest tag for every checkout, as upstream's does -- so an older tag builds as the right release only
    through the role's SETUPTOOLS_SCM_OVERRIDES_FOR_SGLANG."""
    newest = max(builds, key=lambda t: tuple(int(x) for x in re.findall(r"\d+", t)))
    upstream = {tag: b["upstream_describe"] for tag, b in builds.items()}
    assert set(upstream.values()) == {RELEASE_TAG.match(newest).group(1)}, upstream
    assert any(b["scm"] != b["upstream_describe"] for b in builds.values()), builds


def test_a_release_build_serves_as_that_release(builds, launch, models):
    """The server stage runs what the build stage installed: each tag's wheel serves /server_info with its release."""
    served = {}
    for tag, b in builds.items():
        s = launch(
            ["--model-path", str(models["llama3-8b"]), "--mem-fraction-static", "0.85"],
            profile="h100-80gb-x8.json",
            pythonpath=b["site"],
        )
        assert s.wait_for(READY), s.log
        with OPENER.open(f"http://127.0.0.1:{s.port}/server_info", timeout=10) as r:
            served[tag] = json.loads(r.read())["version"]
        s.stop()
    expected = {tag: RELEASE_TAG.match(tag).group(1) for tag in builds}
    assert served == expected, f"{len(builds)} release tags served as {served}, expected {expected}"
