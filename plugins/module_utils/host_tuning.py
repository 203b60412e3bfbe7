# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Host tuning for GPUs that talk to each other over PCIe only, in one place: when the NVIDIA UVM driver's HMM is
turned off, how that option reaches the running module, and what the host's PCIe path between GPUs looks like
(NVLink or not, BAR1 against the GPU's memory, the IOMMU's mode, ACS redirection on the bridges).

The module llmops.sglang.gpu_tuning runs the host's commands and acts on these answers; roles/nvidia_driver calls it
after the driver answers. Everything here is pure: text in, decisions out (tests/unit/test_host_tuning.py reads real
outputs). The evidence behind each setting is in docs/gpu-stack.md ("PCIe-only multi-GPU hosts").

Every finding is a dict: ``check``, ``severity`` (``ok``, ``info``, ``warning``), ``expected``, ``found``, ``action``.
Nothing here fails a host: the kernel command line, the BIOS's Resizable BAR and ACS are the operator's to change, and
the role never changes them."""

from __future__ import absolute_import, annotations, division, print_function

__metaclass__ = type

import re

from ansible_collections.llmops.sglang.plugins.module_utils.gpu_health_parse import _find, q_tree

#: The kernel module's option (a bool parameter, mode 0444: it is read at load time only; sysfs shows Y or N).
UVM_OPTION = "uvm_disable_hmm"
#: What the role writes, the file's whole content for each wanted value (modprobe.d(5) syntax).
CONF_HEADER = (
    "# Written by llmops.sglang (roles/nvidia_driver, nvidia_driver_disable_hmm): the NVIDIA UVM driver's HMM is\n"
    "# turned off (docs/gpu-stack.md, PCIe-only multi-GPU hosts).\n"
)
SETTINGS = ("auto", "true", "false")


class TuningError(ValueError):
    """Input the tuning cannot use; the message says what was expected and what was found."""


def setting(value):
    """``auto``, ``true`` or ``false`` from an inventory value (a YAML bool or a string)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value).strip().lower()
    if text not in SETTINGS:
        raise TuningError(
            "nvidia_driver_disable_hmm: expected auto, true or false, found %r; set one of those (auto turns HMM off "
            "on hosts with two or more GPUs of compute capability 12.x)" % (value,)
        )
    return text


def _major(gpu):
    """The compute capability's major number of one GPU dict (``compute_capability`` 12.0 or ``sm`` sm_120)."""
    cap = gpu.get("compute_capability") or ""
    m = re.match(r"^(\d+)\.\d+$", str(cap))
    if m:
        return int(m.group(1))
    m = re.match(r"^sm_(\d+?)(\d)[a-z]?$", str(gpu.get("sm") or ""))
    return int(m.group(1)) if m else None


def hmm_wanted(value, gpus):
    """(disable HMM?, why) for the setting and the host's GPUs (gpu_facts' ``gpus`` or preflight's PCI list).

    auto: two or more GPUs of compute capability 12.x. Those are the GB20x parts (RTX PRO 6000 Blackwell, RTX 5090),
    which have no NVLink, so their peer traffic is PCIe only; the public reports of multi-GPU hangs that HMM off
    cures are on exactly those hosts. Everywhere else auto leaves the driver's default."""
    choice = setting(value)
    if choice != "auto":
        return choice == "true", "nvidia_driver_disable_hmm is %s" % choice
    majors = [_major(g) for g in gpus or []]
    count = sum(1 for m in majors if m == 12)
    if count >= 2:
        return True, "%d GPUs of compute capability 12.x (PCIe only, no NVLink)" % count
    if count == 1 and len(majors) == 1:
        return False, "one GPU: no peer traffic"
    return False, "no two GPUs of compute capability 12.x"


def conf_text(disable):
    """The modprobe.d file's content when HMM is to be off, None when the file should not exist."""
    return CONF_HEADER + "options nvidia_uvm %s=1\n" % UVM_OPTION if disable else None


def live_value(text):
    """True/False from /sys/module/nvidia_uvm/parameters/uvm_disable_hmm (Y/N), None when it is not readable."""
    if text is None:
        return None
    v = text.strip().upper()
    if v in ("Y", "1"):
        return True
    if v in ("N", "0"):
        return False
    return None


def uvm_plan(disable, current_file, live, refcnt):
    """What to do so the running nvidia_uvm has ``uvm_disable_hmm`` = ``disable``.

    ``current_file``: the role's modprobe.d file's text or None; ``live``: the loaded module's value (live_value) or
    None when nvidia_uvm is not loaded; ``refcnt``: its use count (/sys/module/nvidia_uvm/refcnt) or None.

    Returns {write, remove, content, action, pending}: ``action`` is ``none`` (the module runs with the value, or is
    not loaded and loads the file's value next time), ``reload`` (loaded, unused: unload it so the next load reads the
    option) or ``pending`` (loaded and in use, by a CUDA process such as a serving SGLang: the option takes effect when
    it is next loaded, after SGLang stops or a reboot; nothing running is touched)."""
    content = conf_text(disable)
    write = content is not None and current_file != content
    remove = content is None and current_file is not None
    # With HMM left on, only the role's own file is the role's business: another file may set the option.
    if live is None or live == disable or (not disable and not remove):
        action = "none"
    elif refcnt == 0:
        action = "reload"
    else:
        action = "pending"
    return {"write": write, "remove": remove, "content": content, "action": action, "pending": action == "pending"}


# ---- the PCIe path between the GPUs ----------------------------------------------------------------------------


def parse_topo(text):
    """``nvidia-smi topo -m``: {"gpus": [GPU0, ...], "links": {(GPUi, GPUj): "PIX" | "NV18" | ...}} (GPU pairs only).

    The matrix's header names the columns; each GPU row gives its link to every column. Rows and columns of NICs
    (mlx5_0, NIC0) and the CPU/NUMA affinity columns are ignored."""
    plain = re.sub(r"\x1b\[[0-9;]*m", "", text or "")  # the header is underlined with terminal escapes
    lines = [ln.rstrip() for ln in plain.splitlines() if ln.strip()]
    header, cols = None, []
    for i, line in enumerate(lines):
        words = line.split()
        # the header names the columns (GPU0 GPU1 ... CPU Affinity); GPU0's row has X in its own column
        if len(words) >= 2 and words[0] == "GPU0" and words[1] != "X":
            header = i
            cols = [w for w in words if re.match(r"^GPU\d+$", w)]
            break
    if header is None or not cols:
        raise TuningError(
            "expected the matrix of 'nvidia-smi topo -m' with a header of GPU0 GPU1 ..., found "
            + (repr(lines[0][:80]) if lines else "nothing")
            + "; run 'nvidia-smi topo -m' by hand to see what the driver says"
        )
    links = {}
    gpus = []
    for line in lines[header + 1 :]:
        words = line.split()
        if not words or not re.match(r"^GPU\d+$", words[0]):
            continue
        row = words[0]
        gpus.append(row)
        for k, col in enumerate(cols):
            if col != row and k + 1 < len(words):
                links[(row, col)] = words[k + 1]
    return {"gpus": gpus, "links": links}


def nvlink(topo):
    """Whether any two GPUs of the matrix are joined by NVLink (NV# entries)."""
    return any(v.startswith("NV") for v in topo["links"].values())


def parse_bar1(text):
    """[{id, name, bar1_mib, fb_mib}] from ``nvidia-smi -q`` (or ``-q -d MEMORY``): BAR1 and frame-buffer totals."""
    out = []
    for bus, tree in q_tree(text or ""):
        out.append(
            {
                "id": bus,
                "name": _find(tree, ("Product Name",)),
                "bar1_mib": _mib(_find(tree, ("BAR1 Memory Usage", "Total"))),
                "fb_mib": _mib(_find(tree, ("FB Memory Usage", "Total"))),
            }
        )
    return out


def _mib(text):
    m = re.match(r"^\s*(\d+)\s*MiB", text or "")
    return int(m.group(1)) if m else None


ACS_FLAGS = ("SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl", "DirectTrans")


def parse_acs(text):
    """[{device, ctl}] for every device of ``lspci -vvv`` with an ACS capability: ``ctl`` maps each ACSCtl flag to
    True (+) or False (-)."""
    out, device = [], None
    for line in (text or "").splitlines():
        head = re.match(r"^([0-9a-fA-F]{2,4}:[0-9a-fA-F]{2}(?::[0-9a-fA-F]{2})?\.[0-9a-fA-F])\s+(.*)$", line)
        if head:
            device = "%s %s" % (head.group(1), head.group(2).strip())
            continue
        m = re.match(r"^\s+ACSCtl:\s*(.*)$", line)
        if m and device:
            ctl = {}
            for flag, sign in re.findall(r"(\w+)([+-])", m.group(1)):
                ctl[flag] = sign == "+"
            out.append({"device": device, "ctl": ctl})
    return out


def acs_redirecting(devices):
    """The devices whose ACS redirects peer requests or completions upstream (ReqRedir+ or CmpltRedir+)."""
    return [d["device"] for d in devices if d["ctl"].get("ReqRedir") or d["ctl"].get("CmpltRedir")]


def iommu_mode(group_types, cmdline):
    """``off``, ``passthrough`` or ``translated`` from the IOMMU groups' default domain types (the ``type`` file of
    /sys/kernel/iommu_groups/N: ``identity`` is passthrough, ``DMA`` and ``DMA-FQ`` translate) and, without any
    group, the kernel command line. ``unknown`` when neither says."""
    types = {t.strip() for t in group_types or [] if t and t.strip()}
    if types:
        return "passthrough" if types <= {"identity"} else "translated"
    words = (cmdline or "").split()
    if any(w in ("iommu=pt", "iommu.passthrough=1") for w in words):
        return "passthrough"
    if group_types is not None:
        return "off"  # the groups were read and there are none: no IOMMU is active
    return "unknown"


# ---- findings ----------------------------------------------------------------------------------------------------


def finding(check, severity, expected, found, action=""):
    return {"check": check, "severity": severity, "expected": expected, "found": found, "action": action}


def hmm_finding(disable, why, plan, live):
    if plan["action"] == "reloaded" and live is not None and live != disable:
        return finding(
            "uvm_hmm",
            "warning",
            "nvidia_uvm loaded with %s=%s (%s)" % (UVM_OPTION, "Y" if disable else "N", why),
            "%s=%s after loading nvidia_uvm again: another file sets the option" % (UVM_OPTION, "Y" if live else "N"),
            "find it with: grep -r %s /etc/modprobe.d /lib/modprobe.d" % UVM_OPTION,
        )
    if plan["action"] == "pending":
        return finding(
            "uvm_hmm",
            "warning",
            "nvidia_uvm loaded with %s=%s (%s)" % (UVM_OPTION, "Y" if disable else "N", why),
            "%s=%s in the running module, which a CUDA process uses" % (UVM_OPTION, "Y" if live else "N"),
            "the option is written and takes effect when nvidia_uvm is next loaded: after SGLang stops (a rolling "
            "restart) or at the next reboot",
        )
    state = "%s=%s" % (UVM_OPTION, "Y" if live else "N")
    if live is None:
        state = "not loaded (the next load reads the option)"
    return finding("uvm_hmm", "ok", "%s=%s (%s)" % (UVM_OPTION, "Y" if disable else "N", why), state)


def path_findings(gpu_count, topo, bar1, iommu, redirecting):
    """The PCIe path's findings for a host of ``gpu_count`` GPUs. ``topo`` may be None (not read), ``bar1`` a list
    from parse_bar1, ``iommu`` a mode from iommu_mode, ``redirecting`` the devices from acs_redirecting (None: not
    read). Only hosts with two or more GPUs and no NVLink between them get warnings: that is where peer traffic
    crosses PCIe."""
    out = []
    if gpu_count < 2:
        return [finding("pcie_peers", "info", "two or more GPUs for peer traffic", "%d GPU" % gpu_count)]
    if topo is None:
        return [finding("pcie_peers", "info", "the GPUs' topology (nvidia-smi topo -m)", "not read")]
    if nvlink(topo):
        return [finding("pcie_peers", "ok", "NVLink or PCIe between the GPUs", "NVLink between the GPUs")]
    out.append(finding("pcie_peers", "info", "NVLink or PCIe between the GPUs", "PCIe only (no NVLink)"))
    small = [g for g in bar1 if g["bar1_mib"] is not None and g["fb_mib"] is not None and g["bar1_mib"] < g["fb_mib"]]
    if small:
        g = small[0]
        out.append(
            finding(
                "bar1",
                "warning",
                "BAR1 at least the GPU's memory (Resizable BAR on), so a peer can map all of it over PCIe",
                "BAR1 %d MiB for %d MiB of memory on %d of %d GPUs (first: %s)"
                % (g["bar1_mib"], g["fb_mib"], len(small), len(bar1), g["id"] or g["name"] or "?"),
                "enable Above 4G Decoding and Resizable BAR in the BIOS (the role never changes firmware settings)",
            )
        )
    elif bar1:
        out.append(finding("bar1", "ok", "BAR1 at least the GPU's memory", "BAR1 covers the memory of every GPU"))
    if iommu == "translated" or redirecting:
        found = []
        if iommu == "translated":
            found.append("the IOMMU translates DMA")
        if redirecting:
            found.append("ACS redirects peer requests on %d bridge(s) (first: %s)" % (len(redirecting), redirecting[0]))
        out.append(
            finding(
                "iommu_acs",
                "warning",
                "GPU peer traffic straight through the PCIe switches: the IOMMU off or in passthrough, "
                "ACS redirection off",
                "; ".join(found),
                "NCCL can hang or slow down: add iommu=pt to the kernel command line, or turn ACS off in the BIOS, "
                "and reboot at a time you choose (the role never changes the kernel command line)",
            )
        )
    else:
        out.append(
            finding(
                "iommu_acs",
                "ok" if iommu in ("off", "passthrough") and redirecting is not None else "info",
                "the IOMMU off or in passthrough, ACS redirection off",
                "IOMMU %s; ACS %s" % (iommu, "not read" if redirecting is None else "not redirecting"),
            )
        )
    return out


def worst(findings):
    order = {"ok": 0, "info": 1, "warning": 2}
    return max((f["severity"] for f in findings), key=lambda s: order.get(s, 0), default="ok")
