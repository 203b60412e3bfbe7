"""The stand-in CUDA apt repository: contents, signatures, the cuda-keyring package, and a real apt-get run."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SUBDIR = "www/nvidia/compute/cuda/repos/debian12/x86_64"


def repo(built):
    return built["out"] / SUBDIR


def packages(built):
    out = {}
    for stanza in (repo(built) / "Packages").read_text().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line and not line.startswith(" "))
        if fields:
            out.setdefault(fields["Package"], set()).add(fields["Version"])
    return out


def test_packages_list_driver_branches_toolkits_and_metapackages(built):
    pkgs = packages(built)
    for name in [
        "nvidia-open",
        "nvidia-kernel-open-dkms",
        "nvidia-driver",
        "libcuda1",
        "nvidia-smi",
        "nvidia-persistenced",
        "nvidia-fabricmanager",
        "nvidia-kernel-dkms",
        "nvidia-driver-cuda",
        "cuda-drivers",
    ]:
        want = {"575.57.08-1", "575.64.05-1", "580.95.05-1", "580.105.08-1"}
        if name == "nvidia-fabricmanager":
            want = {"580.95.05-1", "580.105.08-1"}
        assert pkgs[name] == want, name
    assert pkgs["cuda-toolkit-12-8"] == {"12.8.1-1"}
    assert pkgs["cuda-toolkit-12-9"] == {"12.9.1-1"}
    assert pkgs["cuda-toolkit-13-0"] == {"13.0.2-1"}
    assert pkgs["cuda"] == {"12.8.1-1", "12.9.1-1", "13.0.2-1"}
    assert pkgs["cuda-keyring"] == {"1.1-1"}
    text = (repo(built) / "Packages").read_text()
    assert "Depends: cuda-12-8 (>= 12.8.1)" in text
    assert "Depends: nvidia-driver (= 580.95.05-1), nvidia-kernel-dkms (= 580.95.05-1) |" in text


def other_key_env(tmp_path):
    """A GNUPGHOME in tmp_path holding a freshly generated key that is not the mirror's."""
    other_home = tmp_path / "gnupg"
    other_home.mkdir(mode=0o700)
    env = dict(os.environ, GNUPGHOME=str(other_home))
    subprocess.run(
        [
            "gpg",
            "--batch",
            "--pinentry-mode",
            "loopback",
            "--passphrase",
            "",
            "--quick-gen-key",
            "Other <other@example.invalid>",
            "ed25519",
            "sign",
            "never",
        ],
        env=env,
        check=True,
        capture_output=True,
    )
    return env


def test_release_signature_verifies_with_exported_key_only(built, tmp_path):
    keyring = built["out"] / "keys" / "cuda-archive-keyring.gpg"
    r = repo(built)
    ok = subprocess.run(
        ["gpgv", "--keyring", keyring, r / "Release.gpg", r / "Release"], capture_output=True, check=False
    )
    assert ok.returncode == 0, ok.stderr
    ok = subprocess.run(["gpgv", "--keyring", keyring, r / "InRelease"], capture_output=True, check=False)
    assert ok.returncode == 0, ok.stderr
    env = other_key_env(tmp_path)
    other = tmp_path / "other.gpg"
    subprocess.run(["gpg", "--batch", "--export", "-o", other], env=env, check=True)
    bad = subprocess.run(
        ["gpgv", "--keyring", other, r / "Release.gpg", r / "Release"], capture_output=True, check=False
    )
    assert bad.returncode != 0
    subprocess.run(["gpgconf", "--kill", "gpg-agent"], env=env, check=False)


def test_cuda_keyring_deb_ships_key_and_sources_entry(built, tmp_path):
    deb = repo(built) / "cuda-keyring_1.1-1_all.deb"
    listing = subprocess.run(["dpkg-deb", "-c", deb], capture_output=True, text=True, check=True).stdout
    assert "./usr/share/keyrings/cuda-archive-keyring.gpg" in listing
    assert "./etc/apt/sources.list.d/cuda-debian12-x86_64.list" in listing
    subprocess.run(["dpkg-deb", "-x", deb, tmp_path], check=True)
    entry = (tmp_path / "etc/apt/sources.list.d/cuda-debian12-x86_64.list").read_text()
    assert entry == (
        "deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] "
        "http://127.0.0.1:8080/nvidia/compute/cuda/repos/debian12/x86_64/ /\n"
    )
    shipped = (tmp_path / "usr/share/keyrings/cuda-archive-keyring.gpg").read_bytes()
    assert shipped == (built["out"] / "keys" / "cuda-archive-keyring.gpg").read_bytes()


def test_payloads(built, tmp_path):
    def extract(name):
        d = tmp_path / name
        subprocess.run(["dpkg-deb", "-x", repo(built) / name, d], check=True)
        return d

    drv = extract("libnvidia-ml1_575.57.08-1_amd64.deb")
    assert (drv / "usr/lib/sim-gpu/driver-version").read_text() == "575.57.08\n"
    assert not (drv / "usr/bin/nvidia-smi").exists()
    assert not (extract("nvidia-smi_580.95.05-1_amd64.deb") / "usr/bin/nvidia-smi").exists()
    tk = extract("cuda-toolkit-12-8_12.8.1-1_amd64.deb")
    nvcc = subprocess.run([tk / "usr/local/cuda-12.8/bin/nvcc", "-V"], capture_output=True, text=True, check=True)
    assert "Cuda compilation tools, release 12.8, V12.8.93" in nvcc.stdout
    assert nvcc.stdout.startswith("nvcc: NVIDIA (R) Cuda compiler driver\nCopyright (c) 2005-2025 NVIDIA Corporation")
    assert "Build cuda_12.8.r12.8/compiler.35583870_0" in nvcc.stdout
    ctrl = tmp_path / "ctrl"
    subprocess.run(["dpkg-deb", "-e", repo(built) / "cuda-toolkit-12-8_12.8.1-1_amd64.deb", ctrl], check=True)
    assert (
        "update-alternatives --install /usr/local/cuda cuda /usr/local/cuda-12.8 128" in (ctrl / "postinst").read_text()
    )
    unit = extract("nvidia-persistenced_580.95.05-1_amd64.deb") / "lib/systemd/system/nvidia-persistenced.service"
    assert "ExecStart=/usr/bin/nvidia-persistenced" in unit.read_text()


def test_rebuild_is_reproducible_and_skipped(built, tmp_path):
    import apt_repo

    out2 = tmp_path / "out2"
    out2.mkdir()
    shutil.copytree(built["out"] / "gnupg", out2 / "gnupg", ignore=shutil.ignore_patterns("S.*"))
    url = "http://127.0.0.1:8080/nvidia/compute/cuda/repos/debian12/x86_64/"
    apt_repo.build(out2, url)
    for name in ("Packages", "Release", "InRelease", "Release.gpg"):
        assert (out2 / SUBDIR / name).read_bytes() == (repo(built) / name).read_bytes(), name
    assert apt_repo.build(out2, url).get("skipped") is True
    subprocess.run(["gpgconf", "--kill", "gpg-agent"], env=dict(os.environ, GNUPGHOME=str(out2 / "gnupg")), check=False)


def _apt(root: Path, keyring: Path, url: str, *args):
    for d in (
        "state/lists/partial",
        "cache/archives/partial",
        "etc/sources.list.d",
        "etc/preferences.d",
        "etc/apt.conf.d",
    ):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "status").touch()
    (root / "etc/sources.list").write_text(f"deb [signed-by={keyring}] {url} /\n")
    opts = {
        "Dir::State": root / "state",
        "Dir::State::status": root / "status",
        "Dir::Cache": root / "cache",
        "Dir::Etc::sourcelist": root / "etc/sources.list",
        "Dir::Etc::sourceparts": root / "etc/sources.list.d",
        "Dir::Etc::preferencesparts": root / "etc/preferences.d",
        "Dir::Etc::parts": root / "etc/apt.conf.d",
        "Debug::NoLocking": "1",
        "APT::Sandbox::User": "root",
        "Acquire::http::Proxy": "DIRECT",
        "APT::Architecture": "amd64",
        "APT::Architectures": "amd64",
    }
    cmd = ["apt-get", "-q"] + [x for k, v in opts.items() for x in ("-o", f"{k}={v}")] + list(args)
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()} | {"APT_CONFIG": "/dev/null"}
    return subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)


@pytest.mark.skipif(shutil.which("apt-get") is None, reason="needs apt-get")
def test_apt_get_update_and_download_over_http(built, server, tmp_path):
    keyring = built["out"] / "keys" / "cuda-archive-keyring.gpg"
    root = tmp_path / "apt"
    up = _apt(root, keyring, server["apt"], "update")
    assert up.returncode == 0, up.stdout + up.stderr
    dl = _apt(root, keyring, server["apt"], "install", "-y", "--download-only", "nvidia-open", "cuda-toolkit-12-8")
    assert dl.returncode == 0, dl.stdout + dl.stderr
    got = sorted(p.name for p in (root / "cache/archives").glob("*.deb"))
    assert "nvidia-open_580.105.08-1_amd64.deb" in got  # the newest: nothing pins it here
    assert "nvidia-kernel-open-dkms_580.105.08-1_amd64.deb" in got
    assert "cuda-toolkit-12-8_12.8.1-1_amd64.deb" in got
    assert not [n for n in got if n.startswith(("nvidia-kernel-dkms_", "cuda-drivers", "cuda_"))], got


@pytest.mark.skipif(shutil.which("apt-get") is None, reason="needs apt-get")
def test_apt_get_refuses_repo_signed_by_another_key(built, server, tmp_path):
    wrong = tmp_path / "empty.gpg"
    wrong.write_bytes(b"")
    env = other_key_env(tmp_path)
    subprocess.run(["gpg", "--batch", "--yes", "--export", "-o", wrong], env=env, check=True)
    subprocess.run(["gpgconf", "--kill", "gpg-agent"], env=env, check=False)
    up = _apt(tmp_path / "apt", wrong, server["apt"], "update")
    assert up.returncode == 100
    assert "NO_PUBKEY" in up.stdout + up.stderr
