"""The examples run as a user runs them: the notebook of examples/ top to
bottom (nbclient), and the detector's live analysis requesting its own stream
from Python while the detector emulator sends frames."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

from conftest import REPO, Echo, Pair

NOTEBOOK = REPO / "examples" / "scistream.ipynb"


def profile_config(pair: Pair, path: Path) -> Path:
    path.write_text(f"""profile: lab
profiles:
  lab:
    inbound_s2cs: {pair.cons.addr}
    inbound_server_cert: {pair.cons.cert}
    outbound_s2cs: {pair.prod.addr}
    outbound_server_cert: {pair.prod.cert}
""")
    path.chmod(0o600)
    return path


def test_notebook_is_stored_without_outputs() -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, "clear the notebook's outputs before committing it"


def test_notebook_runs(pair: Pair, echo: Echo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCISTREAM_CONFIG", str(profile_config(pair, tmp_path / "config.yaml")))
    monkeypatch.setenv("SCISTREAM_TOKEN", pair.tokens["alice"])
    monkeypatch.setenv("TARGET", f"127.0.0.1:{echo.port}")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs
                     if o.output_type == "stream" and o.name == "stdout")
    lines = text.splitlines()
    sent = [l.split()[1] for l in lines if l.startswith("sent ")]
    back = [l.split()[1] for l in lines if l.startswith("back ")]
    assert sent and sent == back, text
    rates = [float(l.split()[1]) for l in lines if l.startswith("rate ")]
    assert rates and max(rates) > 0, text
    assert "inbound side: released" in text and "outbound side: released" in text, text


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_detector_analysis_requests_its_own_stream(pair: Pair, tmp_path: Path) -> None:
    port = free_port()
    det = subprocess.Popen([sys.executable, str(REPO / "examples/detector/detector.py"), "--bind", f"tcp://127.0.0.1:{port}",
                            "--scan", "16x16", "--frame", "64x64", "--fps", "200", "--wait", "60"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert det.stdout
        first = json.loads(det.stdout.readline())
        assert first["event"] == "listening", first
        ana = subprocess.run([sys.executable, str(REPO / "examples/detector/analysis.py"), "--detector", f"127.0.0.1:{port}",
                              "--inbound", pair.cons.addr, "--inbound-cert", pair.cons.cert,
                              "--outbound", pair.prod.addr, "--outbound-cert", pair.prod.cert,
                              "--token-file", pair.token_file("alice"), "--rates-every", "0.2",
                              "--png", str(tmp_path / "v.png"), "--timeout", "60"],
                             capture_output=True, text=True, timeout=120, env={**os.environ, "SCISTREAM_HOME": str(tmp_path)})
        det_out, _ = det.communicate(timeout=60)
    finally:
        if det.poll() is None:
            det.kill()
            det.wait()
    events = [json.loads(l) for l in ana.stdout.splitlines() if l.startswith("{")]
    assert ana.returncode == 0, ana.stderr
    result = [e for e in events if e["event"] == "result"][0]
    assert result["ok"] and result["frames"] == 256, result
    rates = [e for e in events if e["event"] == "rate"]
    assert any(e["MBps"] > 0 for e in rates), events
    assert "MB/s" in ana.stderr
    uid = [e for e in events if e["event"] == "stream"][0]["uid"]
    with pair.client(pair.cons) as c:
        assert c.get(uid).state == "released"
