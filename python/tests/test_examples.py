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
from nbclient.exceptions import CellExecutionError

from conftest import REPO, Pair

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


def run_notebook(tmp_path: Path) -> tuple[Any, str]:
    """Runs the notebook top to bottom as a user does (nbclient, a real
    kernel); returns it with its outputs, and what it printed."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors, errors
    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs
                     if o.output_type == "stream" and o.name == "stdout")
    assert "Traceback" not in text, text
    return nb, text


def status_table(nb: Any) -> str:
    """The HTML table the notebook shows of the stream's status."""
    tables = [o["data"]["text/html"] for c in nb.cells if c.cell_type == "code" for o in c.outputs
              if o.output_type == "execute_result" and "text/html" in o.get("data", {})]
    assert len(tables) == 1, tables
    return str(tables[0])


@pytest.fixture
def notebook_env(pair: Pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCISTREAM_CONFIG", str(profile_config(pair, tmp_path / "config.yaml")))
    monkeypatch.setenv("SCISTREAM_TOKEN", pair.tokens["alice"])
    for k in ("TARGET", "INBOUND", "OUTBOUND", "SIZE", "RATE", "APP_WAIT", "WAIT"):
        monkeypatch.delenv(k, raising=False)


def test_notebook_runs(notebook_env: None, tmp_path: Path) -> None:
    """As meant: no TARGET, so the notebook brings its own echo server; the
    data comes back byte-exact, the rates are shown with their unit, and
    the stream is released."""
    nb, text = run_notebook(tmp_path)
    lines = text.splitlines()
    assert "no TARGET given: an echo server on 127.0.0.1:" in text, text
    sent = [l.split()[1] for l in lines if l.startswith("sent ")]
    back = [l.split()[1] for l in lines if l.startswith("back ")]
    assert sent and sent == back, text
    rates = [float(l.split()[1]) for l in lines if l.startswith("rate ")]
    assert rates and max(rates) > 0 and all(" MB/s to the listener" in l for l in lines if l.startswith("rate ")), text
    assert "reserved 50 Mbit/s" in text, text
    assert "did not come through" not in text, text
    assert "inbound side: released" in text and "outbound side: released" in text, text
    assert "bits per second" in status_table(nb) and "connected" in status_table(nb)


def test_notebook_without_an_application_says_why(notebook_env: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """TARGET where nothing listens: the notebook stops sampling within its
    bound, prints the gateways' reason (application ... not reachable),
    ends without a traceback (no KeyError), and releases the stream."""
    port = free_port()
    monkeypatch.setenv("TARGET", f"127.0.0.1:{port}")
    monkeypatch.setenv("APP_WAIT", "2s")
    monkeypatch.setenv("WAIT", "20")
    nb, text = run_notebook(tmp_path)
    assert "the data did not come through" in text, text
    assert f"application 127.0.0.1:{port} not reachable for 2s" in text, text
    assert "inbound gateway: dial_failed" in text, text
    # A line while bytes move (until the buffers on the way are full), none
    # while they wait: not one per sample (WAIT / 0.5 s = 40 of them).
    assert len([l for l in text.splitlines() if l.startswith("rate ")]) <= 15, text
    assert "inbound side: released" in text and "outbound side: released" in text, text
    assert "not reachable" in status_table(nb)


def test_notebook_without_a_configuration_names_stream_s_arguments(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No configuration file, no gateway given: the notebook stops at
    stream() with the error naming what stream() takes (inbound=,
    outbound=) and the file it looked for, not Client's s2cs=."""
    monkeypatch.setenv("SCISTREAM_HOME", str(tmp_path))  # no config.yaml there
    for k in ("TARGET", "INBOUND", "OUTBOUND"):
        monkeypatch.delenv(k, raising=False)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    with pytest.raises(CellExecutionError) as e:
        NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    assert e.value.ename == "ConfigError", e.value
    assert e.value.evalue.startswith("no inbound gateway and no outbound gateway: give stream(inbound='HOST:PORT', "
                                     "outbound='HOST:PORT', ...)"), e.value.evalue
    assert str(tmp_path / "config.yaml") in e.value.evalue and "s2cs=" not in e.value.evalue


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
