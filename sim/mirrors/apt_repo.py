"""Signed flat apt repository shaped like NVIDIA's CUDA repository for Debian 12 (stand-in packages only).

The driver packages' metadata is Debian's own (driver_graph: names, Source, relations, exact-version constraints),
relabelled to the served versions; the toolkits are modelled on NVIDIA's cuda-toolkit-X-Y packages. The mirror
also serves the PCI id database of Debian's pci.ids package at /misc/pci.ids (sim/gpu/pci_ids.py).
"""

import gzip
import hashlib
import io
import json
import os
import shutil
import time
from email.utils import formatdate
from pathlib import Path

import debian_meta
import driver_graph
import ubuntu_graph
from common import EPOCH, Stamp, clamp_mtimes, fingerprint, reset_dir, run, write

REPO_SUBDIR = "nvidia/compute/cuda/repos/debian12/x86_64"
# NVIDIA's Ubuntu repositories, for nodes with an Ubuntu identity (ubuntu_graph; sim/os/README.md)
UBUNTU_SUBDIRS = {name: f"nvidia/compute/cuda/repos/{name}/x86_64" for name in ubuntu_graph.RELEASES}
KEYRING_NAME = "cuda-archive-keyring.gpg"
SOURCES_NAME = "cuda-debian12-x86_64.list"
KEY_UID = "CUDA stand-in archive signing key (tests only) <cuda-sim@example.invalid>"
MAINTAINER = "Simulated CUDA vendor <cuda-sim@example.invalid>"

# Two versions per branch: the pinned one and a newer one, as NVIDIA's repository always carries (so a pin that misses
# a package of the driver's source packages fails here exactly as on a real server).
DRIVER_VERSIONS = ["575.57.08", "575.64.05", "580.95.05", "580.105.08"]
# (package suffix, toolkit version, nvcc version, nvcc "Built on", nvcc build id, minimum driver of cuda-drivers)
TOOLKITS = [
    ("12-8", "12.8.1", "12.8.93", "Fri_Feb_21_20:23:50_PST_2025", "cuda_12.8.r12.8/compiler.35583870_0", "570.124.06"),
    ("12-9", "12.9.1", "12.9.86", "Tue_May_27_02:21:03_PDT_2025", "cuda_12.9.r12.9/compiler.36037853_0", "575.57.08"),
    (
        "13-0",
        "13.0.2",
        "13.0.88",
        "Wed_Aug_20_01:58:59_PM_PDT_2025",
        "cuda_13.0.r13.0/compiler.36424714_0",
        "580.95.05",
    ),
]
KEYRING_VERSION = "1.1-1"

SIM_NOTE = "Stand-in package for simulated test nodes: no kernel module, no compiler, no GPU code."


def _sh(body):
    return "#!/bin/sh\n# " + SIM_NOTE + "\n" + body.lstrip("\n")


# Debian's (and NVIDIA's Debian) names of the packages that carry what the simulated node reads; Ubuntu's names are
# ubuntu_graph.payload_role's.
DEBIAN_PAYLOAD_ROLES = {
    "libnvidia-ml1": "nvml",
    "nvidia-kernel-open-dkms": "open",
    "nvidia-open-kernel-dkms": "open",
    "nvidia-kernel-dkms": "proprietary",
    "nvidia-persistenced": "persistenced",
}


def sim_payloads(pkg):
    """The files a package ships on a simulated node: a README, plus what the simulated GPU reads."""
    name, ver = pkg["Package"], pkg["Version"]
    v = ver.rsplit("-", 1)[0]
    files = {f"usr/share/doc/{name}/README.sim": SIM_NOTE + "\n"}
    role = DEBIAN_PAYLOAD_ROLES.get(name) or ubuntu_graph.payload_role(name)
    if role == "nvml":
        # NVML reports the driver version: the simulated nvidia-smi and torch read it here.
        files["usr/lib/sim-gpu/driver-version"] = v + "\n"
    elif role in ("open", "proprietary"):
        files["usr/lib/sim-gpu/kernel-module-flavor"] = role + "\n"
    elif role == "persistenced":
        files.update(persistenced_files())
    elif name.startswith("nvidia-fabricmanager"):
        files.update(fabricmanager_files(v))
    return files


def persistenced_files():
    return {
        "usr/bin/nvidia-persistenced": (
            _sh(
                """
set -e
if [ ! -r "${SIM_GPU_DRIVER_FILE:-/usr/lib/sim-gpu/driver-version}" ]; then
    echo "nvidia-persistenced failed to initialize. Check syslog for more details." >&2
    exit 1
fi
mkdir -p /run/nvidia-persistenced
: > /run/nvidia-persistenced/socket
echo "nvidia-persistenced: Started ($$)"
exec sleep infinity
"""
            ),
            0o755,
        ),
        "lib/systemd/system/nvidia-persistenced.service": (
            "[Unit]\nDescription=NVIDIA Persistence Daemon\nWants=syslog.target\n\n"
            "[Service]\nType=simple\nRuntimeDirectory=nvidia-persistenced\n"
            "ExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced --no-persistence-mode "
            "--verbose\n\n[Install]\nWantedBy=multi-user.target\n"
        ),
    }


def fabricmanager_files(v):
    return {
        "usr/bin/nv-fabricmanager": (
            _sh(
                f"""
FM_VERSION="{v}"
DRIVER=$(cat "${{SIM_GPU_DRIVER_FILE:-/usr/lib/sim-gpu/driver-version}}" 2>/dev/null)
if [ -z "$DRIVER" ]; then
    echo "fabric manager: NVIDIA driver is not loaded" >&2
    exit 1
fi
if [ "$DRIVER" != "$FM_VERSION" ]; then
    echo "fabric manager version $FM_VERSION is not compatible with the NVIDIA driver version $DRIVER" >&2
    exit 1
fi
if ! grep -qs '"nvswitch": *true' "${{SIM_GPU_PROFILE:-/etc/sim-gpu/profile.json}}"; then
    echo "request to query NVSwitch device information from NVSwitch driver failed with error:" \\
        "WARNING Nothing to do [NV_WARN_NOTHING_TO_DO]" >&2
    exit 1
fi
echo "Successfully configured all the available NVSwitches to route GPU NVLink traffic."
exec sleep infinity
"""
            ),
            0o755,
        ),
        "usr/share/nvidia/nvswitch/fabricmanager.cfg": "# stand-in configuration\nLOG_LEVEL=4\n",
        "lib/systemd/system/nvidia-fabricmanager.service": (
            "[Unit]\nDescription=NVIDIA fabric manager service\n\n"
            "[Service]\nType=simple\n"
            "ExecStart=/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg\n"
            "LimitCORE=infinity\n\n[Install]\nWantedBy=multi-user.target\n"
        ),
    }


def toolkit_packages(spec):
    suffix, version, nvcc_version, built_on, build_id, min_driver = spec
    mm = suffix.replace("-", ".")
    ver = f"{version}-1"
    prio = suffix.replace("-", "")
    prefix = f"/usr/local/cuda-{mm}"
    major = mm.split(".")[0]
    banner = (
        "nvcc: NVIDIA (R) Cuda compiler driver\n"
        "Copyright (c) 2005-2025 NVIDIA Corporation\n"
        f"Built on {built_on}\n"
        f"Cuda compilation tools, release {mm}, V{nvcc_version}\n"
        f"Build {build_id}\n"
    )
    nvcc = _sh(
        f"""
for arg in "$@"; do
    case "$arg" in
        --version|-V)
            cat <<'BANNER'
{banner}BANNER
            exit 0 ;;
    esac
done
echo "nvcc fatal   : the stand-in CUDA toolkit cannot compile (simulated node)" >&2
exit 1
"""
    )
    version_json = json.dumps(
        {
            "cuda": {"name": "CUDA SDK", "version": version},
            "cuda_cudart": {"name": "CUDA Runtime (cudart)", "version": nvcc_version.rsplit(".", 1)[0] + ".90"},
            "cuda_nvcc": {"name": "CUDA NVCC", "version": nvcc_version},
        },
        indent=3,
    )
    postinst = _sh(
        f"""
set -e
if [ "$1" = configure ]; then
    update-alternatives --install /usr/local/cuda cuda {prefix} {prio}
    update-alternatives --install /usr/local/cuda-{major} cuda-{major} {prefix} {prio}
fi
"""
    )
    prerm = _sh(
        f"""
set -e
if [ "$1" = remove ] || [ "$1" = deconfigure ]; then
    update-alternatives --remove cuda {prefix}
    update-alternatives --remove cuda-{major} {prefix}
fi
"""
    )
    return [
        {
            "Package": f"cuda-toolkit-{suffix}",
            "Version": ver,
            "Section": "devel",
            "Description": f"CUDA Toolkit {mm} (stand-in: nvcc --version and version.json only)",
            "files": {
                f"{prefix[1:]}/bin/nvcc": (nvcc, 0o755),
                f"{prefix[1:]}/version.json": version_json + "\n",
                f"{prefix[1:]}/include/cuda.h": f"/* stand-in */\n#define CUDA_VERSION {major}0{mm.split('.')[1]}0\n",
            },
            "scripts": {"postinst": postinst, "prerm": prerm},
        },
        {
            "Package": f"cuda-{suffix}",
            "Version": ver,
            "Depends": f"cuda-toolkit-{suffix} (= {ver}), cuda-drivers (>= {min_driver})",
            "Section": "metapackages",
            "Description": f"CUDA {mm} toolkit and driver metapackage (stand-in)",
            "files": {f"usr/share/doc/cuda-{suffix}/README.sim": SIM_NOTE + "\n"},
        },
        {
            "Package": "cuda",
            "Version": ver,
            "Depends": f"cuda-{suffix} (>= {version})",
            "Section": "metapackages",
            "Description": "CUDA toolkit and driver metapackage (stand-in)\n"
            " Pulls the driver; roles must not install it.",
            "files": {"usr/share/doc/cuda/README.sim": SIM_NOTE + "\n"},
        },
    ]


def keyring_package(keyring: bytes, repo_url: str, sources_name: str = SOURCES_NAME):
    return {
        "Package": "cuda-keyring",
        "Version": KEYRING_VERSION,
        "Architecture": "all",
        "Section": "misc",
        "Description": "GPG keyring and apt source for the CUDA repository (stand-in, test key)",
        "files": {
            f"usr/share/keyrings/{KEYRING_NAME}": keyring,
            f"etc/apt/sources.list.d/{sources_name}": (
                f"deb [signed-by=/usr/share/keyrings/{KEYRING_NAME}] {repo_url} /\n"
            ),
        },
        "conffiles": [f"/etc/apt/sources.list.d/{sources_name}"],
    }


def repo_packages(drivers, keyring: bytes, repo_url: str, sources_name: str = SOURCES_NAME):
    """A repository's packages: the driver packages given (their payloads added), the toolkits, cuda-keyring."""
    pkgs = [dict(p, files=sim_payloads(p)) for p in drivers]
    for tk in TOOLKITS:
        pkgs += toolkit_packages(tk)
    pkgs.append(keyring_package(keyring, repo_url, sources_name))
    return pkgs


def all_packages(keyring: bytes, repo_url: str):
    """NVIDIA's Debian 12 repository: Debian's driver packages at every served version."""
    return repo_packages(driver_graph.graph(DRIVER_VERSIONS), keyring, repo_url)


def ubuntu_packages(keyring: bytes, repo_url: str, name: str):
    """One Ubuntu release's repository: Ubuntu's driver names at every served version (ubuntu_graph)."""
    drivers = [p for version in DRIVER_VERSIONS for p in ubuntu_graph.driver_packages(version)]
    return repo_packages(drivers, keyring, repo_url, f"cuda-{name}-x86_64.list")


def write_repo(repo: Path, pkgs, work: Path, key: dict):
    """A signed flat repository of ``pkgs`` in ``repo`` (``key``: gnupghome, fpr, keyring, armored); returns the
    .deb paths."""
    gnupghome, fpr, keyring, armored = key["gnupghome"], key["fpr"], key["keyring"], key["armored"]
    reset_dir(repo)
    reset_dir(work)
    debs = [build_deb(p, work, repo) for p in pkgs]
    shutil.rmtree(work)
    packages = run(["dpkg-scanpackages", "--multiversion", ".", "/dev/null"], cwd=repo)
    write(repo / "Packages", packages)
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as gz:
        gz.write(packages.encode())
    write(repo / "Packages.gz", buf.getvalue())
    write(repo / "Release", release_text(repo, ["Packages", "Packages.gz"]))
    sign(repo, gnupghome, fpr)
    write(repo / f"{fpr[-8:].lower()}.pub", armored)
    write(repo / KEYRING_NAME, keyring)
    clamp_mtimes(repo)
    os.utime(repo, (EPOCH, EPOCH))
    return debs


def build_deb(pkg, work: Path, repo: Path):
    name, ver = pkg["Package"], pkg["Version"]
    arch = pkg.get("Architecture", "amd64")
    stage = work / f"{name}_{ver}"
    reset_dir(stage)
    size = 0
    for rel, content in pkg.get("files", {}).items():
        body, mode = content if isinstance(content, tuple) else (content, 0o644)
        data = body if isinstance(body, bytes) else body.encode()
        size += len(data)
        write(stage / rel.replace("{pkg}", name), data, mode)
    fields = ["Package", "Source", "Version", "Architecture", "Maintainer", "Installed-Size", "Multi-Arch"]
    fields += ["Pre-Depends", "Depends", "Recommends", "Suggests", "Provides", "Conflicts", "Breaks", "Replaces"]
    fields += ["Section", "Priority", "Description"]
    meta = {k: v for k, v in pkg.items() if k not in ("files", "scripts", "conffiles")}
    meta.update(Architecture=arch, Maintainer=MAINTAINER, Priority="optional")
    meta["Installed-Size"] = str(max(1, (size + 1023) // 1024))
    control = "".join(f"{k}: {meta[k]}\n" for k in fields if k in meta)
    write(stage / "DEBIAN/control", control)
    for script, body in pkg.get("scripts", {}).items():
        write(stage / "DEBIAN" / script, body, 0o755)
    if pkg.get("conffiles"):
        write(stage / "DEBIAN/conffiles", "".join(c + "\n" for c in pkg["conffiles"]))
    for d in [stage, *[p for p in stage.rglob("*") if p.is_dir()]]:
        d.chmod(0o755)
    clamp_mtimes(stage)
    deb = repo / f"{name}_{ver.split(':')[-1]}_{arch}.deb"
    run(["dpkg-deb", "--root-owner-group", "-Zgzip", "-z1", "--build", stage, deb])
    return deb


def pci_ids_module():
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "gpu" / "pci_ids.py"
    spec = importlib.util.spec_from_file_location("sim_pci_ids", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def gpg_env(gnupghome: Path):
    return {"GNUPGHOME": str(gnupghome)}


def ensure_key(gnupghome: Path) -> str:
    """Create the ed25519 signing key once (no passphrase); return its fingerprint."""
    gnupghome.mkdir(parents=True, exist_ok=True)
    gnupghome.chmod(0o700)
    env = gpg_env(gnupghome)
    listing = run(["gpg", "--batch", "--with-colons", "--list-secret-keys"], env=env)
    fprs = [line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:")]
    if fprs:
        return fprs[0]
    faked = time.strftime("%Y%m%dT%H%M%S!", time.gmtime(EPOCH))
    run(
        [
            "gpg",
            "--batch",
            "--pinentry-mode",
            "loopback",
            "--passphrase",
            "",
            "--faked-system-time",
            faked,
            "--quick-gen-key",
            KEY_UID,
            "ed25519",
            "sign",
            "never",
        ],
        env=env,
    )
    return ensure_key(gnupghome)


def release_text(repo: Path, files):
    lines = [
        "Origin: NVIDIA",
        "Label: NVIDIA CUDA",
        "Architectures: amd64 all",
        f"Date: {formatdate(EPOCH, usegmt=True)}",
        "Description: stand-in CUDA repository for simulated nodes (test key)",
    ]
    for title, algo in (("MD5Sum", "md5"), ("SHA1", "sha1"), ("SHA256", "sha256"), ("SHA512", "sha512")):
        lines.append(f"{title}:")
        for f in files:
            data = (repo / f).read_bytes()
            lines.append(f" {hashlib.new(algo, data).hexdigest()} {len(data):>16} {f}")
    return "\n".join(lines) + "\n"


def sign(repo: Path, gnupghome: Path, fpr: str):
    env = gpg_env(gnupghome)
    faked = time.strftime("%Y%m%dT%H%M%S!", time.gmtime(EPOCH))
    base = ["gpg", "--batch", "--yes", "--faked-system-time", faked, "--local-user", fpr, "--digest-algo", "SHA512"]
    run([*base, "--armor", "--detach-sign", "-o", repo / "Release.gpg", repo / "Release"], env=env)
    run([*base, "--clearsign", "-o", repo / "InRelease", repo / "Release"], env=env)


def build(out: Path, repo_url: str, force=False):
    """Build the signed repository under out/www/REPO_SUBDIR; return a summary dict."""
    gnupghome = out / "gnupg"
    repo = out / "www" / REPO_SUBDIR
    fpr = ensure_key(gnupghome)
    here = Path(__file__).resolve().parent
    debian = (
        sorted((debian_meta.cache_dir() / "dists").rglob("Packages.xz"))
        if (debian_meta.cache_dir() / "dists").exists()
        else []
    )
    stamp = Stamp(
        out,
        "apt",
        fingerprint(
            Path(__file__),
            here / "driver_graph.py",
            here / "ubuntu_graph.py",
            ubuntu_graph.FIXTURE,
            repo_url,
            fpr,
            *debian,
        ),
    )
    summary_file = out / "apt-summary.json"
    if not force and stamp.fresh(repo / "InRelease", summary_file):
        return json.loads(summary_file.read_text()) | {"skipped": True}
    env = gpg_env(gnupghome)
    keyring_path = out / "keys" / KEYRING_NAME
    keyring_path.parent.mkdir(parents=True, exist_ok=True)
    run(["gpg", "--batch", "--yes", "--export", "-o", keyring_path, fpr], env=env)
    keyring = keyring_path.read_bytes()
    armored = run(["gpg", "--batch", "--armor", "--export", fpr], env=env)
    work = out / ".work" / "apt"
    key = {"gnupghome": gnupghome, "fpr": fpr, "keyring": keyring, "armored": armored}
    debs = write_repo(repo, all_packages(keyring, repo_url), work, key)
    ubuntu = {}
    for name, subdir in UBUNTU_SUBDIRS.items():
        url = repo_url.replace(REPO_SUBDIR, subdir)
        built = write_repo(out / "www" / subdir, ubuntu_packages(keyring, url, name), work, key)
        ubuntu[name] = {
            "repo_dir": str(out / "www" / subdir),
            "repo_url": url,
            "packages": sorted(d.name for d in built),
        }
    write(out / "keys" / "cuda-archive-key.asc", armored)
    pci_ids = out / "www" / "misc" / "pci.ids"
    write(pci_ids, Path(pci_ids_module().ensure()).read_bytes())
    summary = {
        "repo_dir": str(repo),
        "repo_url": repo_url,
        "key_fingerprint": fpr,
        "keyring": str(keyring_path),
        "armored_key": str(out / "keys" / "cuda-archive-key.asc"),
        "packages": sorted(d.name for d in debs),
        "ubuntu": ubuntu,
    }
    write(summary_file, json.dumps(summary, indent=2) + "\n")
    stamp.done()
    return summary
