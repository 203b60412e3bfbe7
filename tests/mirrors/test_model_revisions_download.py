"""Model revisions side by side (issue 28 item 3), the download half: hf_snapshot with by_commit puts each commit of
the hub stand-in's sim-org/GLM-5-NVFP4 (two real commits: tag v1.0 and main, main changing README.md) into its own
directory, answers a branch from the newest complete one without the network, and the seed's share serves a root of
commit directories under /COMMIT/PATH."""

import http.client
import json

from _module_util import run_module
from share_util import start_share, stop_share

REPO = "sim-org/GLM-5-NVFP4"


def args(server, root, **kw):
    return {
        "repo_id": REPO,
        "endpoint": server["hf_root"],
        "dest": str(root),
        "by_commit": True,
        "reserve_gib": 0,
        **kw,
    }


def refs(built):
    return json.loads((built["out"] / "hub" / REPO / "repo.json").read_text())["refs"]


def test_each_revision_goes_into_its_own_commit_directory_beside_the_others(built, server, tmp_path):
    root = tmp_path / "GLM-5-NVFP4.revisions"
    tags = refs(built)
    rc, old, out = run_module(args(server, root, revision="v1.0"))
    assert rc == 0 and old["changed"], out
    assert old["commit"] == tags["v1.0"] and old["dest"] == str(root / tags["v1.0"])
    rc, new, out = run_module(args(server, root, revision="main"))
    assert rc == 0 and new["changed"], out
    assert new["commit"] == tags["main"] != tags["v1.0"] and new["dest"] == str(root / tags["main"])
    assert sorted(p.name for p in root.iterdir()) == sorted([tags["v1.0"], tags["main"]])
    # both complete, each with its own README (main updated the model card), neither touched by the other
    assert "model card updated" in (root / tags["main"] / "README.md").read_text()
    old_readme = root / tags["v1.0"] / "README.md"
    assert not old_readme.exists() or "model card updated" not in old_readme.read_text()
    for sha in tags.values():
        assert json.loads((root / sha / ".llmops-snapshot.json").read_text())["commit"] == sha


def test_a_branch_is_answered_from_its_newest_complete_directory_offline(built, server, tmp_path):
    root = tmp_path / "revisions"
    tags = refs(built)
    assert run_module(args(server, root, revision="main"))[0] == 0
    assert run_module(args(server, root, revision="v1.0"))[0] == 0
    rc, res, out = run_module(args(server, root, revision="main", offline=True))
    assert rc == 0 and not res["changed"] and res["source"] == "marker", out
    assert res["commit"] == tags["main"] and res["dest"] == str(root / tags["main"])
    rc, res, out = run_module(args(server, root, revision=tags["v1.0"], offline=True))  # a commit names its directory
    assert rc == 0 and res["dest"] == str(root / tags["v1.0"]), out
    rc, res, out = run_module(args(server, tmp_path / "empty", revision="main", offline=True))
    assert rc == 1 and "offline: expected a complete snapshot" in res["msg"] and "Traceback" not in out


def test_the_share_serves_each_commit_from_its_own_directory(built, server, tmp_path):
    root = tmp_path / "revisions"
    tags = refs(built)
    for rev in ("v1.0", "main"):
        assert run_module(args(server, root, revision=rev))[0] == 0
    proc = start_share(root, tmp_path / "run")

    def get(path):
        conn = http.client.HTTPConnection("127.0.0.1", proc.port, timeout=10)
        try:
            conn.request("GET", path, headers={"Authorization": f"Bearer {proc.token}"})
            r = conn.getresponse()
            return r.status, r.read()
        finally:
            conn.close()

    try:
        for sha in tags.values():
            assert get(f"/{sha}/config.json") == (200, (root / sha / "config.json").read_bytes())
        # main's README (the model card it updated) under main; under v1.0 only what v1.0 holds
        assert get(f"/{tags['main']}/README.md") == (200, (root / tags["main"] / "README.md").read_bytes())
        old_readme = root / tags["v1.0"] / "README.md"
        status, body = get(f"/{tags['v1.0']}/README.md")
        assert (status, body) == ((200, old_readme.read_bytes()) if old_readme.exists() else (404, body))
        assert get(f"/{'0' * 40}/config.json")[0] == 404  # a commit the seed does not hold
    finally:
        stop_share(proc)
