// The status page of an s2cs gateway. The page itself holds no data: it
// asks the gateway's own API, GET /v1/status, with the bearer token the
// operator typed, which stays in this tab's sessionStorage (never in a
// URL, a cookie or the browser's lasting storage). Everything from the API is written
// with textContent or SVG attributes, never parsed as HTML.
(function () {
  "use strict";
  var KEY = "scistream.status.token";
  var timer = null;

  function $(id) { return document.getElementById(id); }

  function el(tag, text, cls) {
    var e = document.createElement(tag);
    if (text !== undefined && text !== null) { e.textContent = String(text); }
    if (cls) { e.className = cls; }
    return e;
  }

  function rate(bps) { return (Number(bps || 0) / 1e6).toFixed(1) + " MB/s"; }

  function bytes(n) {
    n = Number(n || 0);
    if (n < 1024) { return n + " B"; }
    var units = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    var f = n, i = -1;
    do { f /= 1024; i++; } while (f >= 1024 && i < units.length - 1);
    return f.toFixed(1) + " " + units[i];
  }

  function say(msg) { $("message").textContent = msg || ""; }

  function showLogin(msg) {
    if (timer) { clearTimeout(timer); timer = null; }
    $("status").hidden = true;
    $("login").hidden = false;
    say(msg);
    $("token").focus();
  }

  function token() {
    try { return sessionStorage.getItem(KEY); } catch (e) { return null; }
  }

  function forget(msg) {
    try { sessionStorage.removeItem(KEY); } catch (e) { /* storage off */ }
    showLogin(msg);
  }

  function schedule(seconds) {
    if (timer) { clearTimeout(timer); }
    timer = setTimeout(poll, Math.min(5, Math.max(1, seconds || 1)) * 1000);
  }

  function poll() {
    var tok = token();
    if (!tok) { showLogin(""); return; }
    fetch("/v1/status", {
      headers: { "Authorization": "Bearer " + tok, "Accept": "application/json" },
      cache: "no-store", credentials: "omit", redirect: "error"
    }).then(function (resp) {
      return resp.json().catch(function () { return null; }).then(function (body) {
        return { resp: resp, body: body };
      });
    }).then(function (r) {
      var msg = r.body && r.body.error && r.body.error.message;
      if (r.resp.status === 401) {
        forget("The gateway refused the token: " + (msg || "unauthenticated") + ". Give a token from its --tokens file.");
        return;
      }
      if (!r.resp.ok || !r.body) {
        say("The gateway answered " + r.resp.status + (msg ? ": " + msg : "") + "; trying again.");
        schedule(2);
        return;
      }
      say("");
      render(r.body);
      var iv = r.body.streams.length && r.body.streams[0].stats && r.body.streams[0].stats.rates ? r.body.streams[0].stats.rates.interval_s : 1;
      schedule(iv);
    }).catch(function (e) {
      say("Cannot reach the gateway (" + e.message + "); trying again.");
      schedule(2);
    });
  }

  function dd(dl, term, value, cls) {
    dl.appendChild(el("dt", term));
    var d = el("dd", value, cls);
    d.dataset.key = term;
    dl.appendChild(d);
  }

  function render(st) {
    $("login").hidden = true;
    $("status").hidden = false;
    var h = st.health;
    $("gw-name").textContent = st.listener_ip;
    var up = (new Date(st.now) - new Date(st.started)) / 1000;
    $("gw-summary").textContent = "version " + st.version + " · up " + duration(up) + " · " +
      (h.ready ? "ready" : "NOT READY");
    $("gw-summary").className = "summary " + (h.ready ? "ok" : "bad");

    var dl = $("health");
    dl.replaceChildren();
    var s = h.streams;
    dd(dl, "streams live", s.connected + " connected, " + s.listening + " listening, " + s.requested + " being created");
    dd(dl, "streams ended", s.released + " released, " + s.expired + " expired, " + s.failed + " failed");
    dd(dl, "data ports", h.ports_in_use + " of " + h.ports_capacity + " in use");
    dd(dl, "connection files", h.conn_files_in_use + " of " + h.conn_files_capacity + " in use");
    var w = h.wan_conns;
    dd(dl, "WAN connections", w.relaying + " relaying, " + w.waiting + " waiting for their application, " + w.handshake + " in their handshake");
    dd(dl, "pooled WAN legs", h.pooled_legs.idle + " idle, " + h.pooled_legs.busy + " busy");
    var e = h.api_errors;
    dd(dl, "authentication failures", e.unauthenticated, e.unauthenticated ? "bad" : "");
    dd(dl, "admission refusals", e.no_resources, e.no_resources ? "bad" : "");
    var refused = Object.keys(h.refused).filter(function (k) { return h.refused[k] > 0; })
      .map(function (k) { return h.refused[k] + " " + k; });
    dd(dl, "connections refused", refused.length ? refused.join(", ") : "none");

    var tb = $("stream-rows");
    tb.replaceChildren();
    st.streams.forEach(function (v) { tb.appendChild(row(v)); });
    $("stream-count").textContent = "(" + st.streams.length + " live)";
    $("updated").textContent = new Date(st.now).toLocaleTimeString();
  }

  function duration(s) {
    s = Math.max(0, Math.floor(s));
    var d = Math.floor(s / 86400), hh = Math.floor(s % 86400 / 3600), m = Math.floor(s % 3600 / 60);
    if (d) { return d + "d " + hh + "h"; }
    if (hh) { return hh + "h " + m + "m"; }
    return m + "m " + (s % 60) + "s";
  }

  function cell(tr, text, cls) {
    var td = el("td", text, cls);
    tr.appendChild(td);
    return td;
  }

  function row(v) {
    var x = v.stats || {};
    var r = x.rates || { to_wan: { window: {}, steady: {} }, from_wan: { window: {}, steady: {} } };
    var tr = el("tr");
    tr.dataset.uid = v.uid;
    var id = cell(tr, v.uid, "uid");
    id.appendChild(el("div", v.role + " · " + v.wan + " · " + v.engine, "sub"));
    cell(tr, v.owner);
    var state = cell(tr, v.state, v.state === "connected" ? "ok" : "");
    if (x.peer) { state.appendChild(el("div", "peer gateway " + x.peer, x.peer === "up" ? "sub" : "sub bad")); }
    var peers = cell(tr, (v.listeners || []).join(", "));
    peers.appendChild(el("div", "→ " + (v.targets || []).join(", "), "sub"));
    var conns = cell(tr, (x.active_conns || 0) + " active");
    conns.dataset.active = x.active_conns || 0;
    conns.appendChild(el("div", (x.total_conns || 0) + " total, " + (x.waiting_conns || 0) + " waiting, " +
      (x.rejected_conns || 0) + " refused, " + (x.aborted_conns || 0) + " aborted", "sub"));
    var b = cell(tr, bytes(x.bytes_to_wan) + " / " + bytes(x.bytes_from_wan));
    b.dataset.bytesToWan = x.bytes_to_wan || 0;
    b.dataset.bytesFromWan = x.bytes_from_wan || 0;
    b.className = "bytes";
    var now = cell(tr, rate(x.rate_to_wan_Bps) + " / " + rate(x.rate_from_wan_Bps), "rate");
    now.dataset.rateToWan = x.rate_to_wan_Bps || 0;
    now.dataset.rateFromWan = x.rate_from_wan_Bps || 0;
    var win = cell(tr, "");
    [["to", r.to_wan.window], ["from", r.from_wan.window]].forEach(function (p) {
      win.appendChild(el("div", p[0] + " " + rate(p[1].mean_Bps) + " ± " + rate(p[1].stddev_Bps) + " (" + rate(p[1].peak_Bps) + ")", "legend-" + p[0]));
    });
    var steady = cell(tr, "", "steady");
    steady.dataset.steadyToWan = r.to_wan.steady.mean_Bps || 0;
    steady.dataset.steadyFromWan = r.from_wan.steady.mean_Bps || 0;
    [["to", r.to_wan.steady], ["from", r.from_wan.steady]].forEach(function (p) {
      steady.appendChild(el("div", p[0] + " " + rate(p[1].mean_Bps) + " ± " + rate(p[1].stddev_Bps), "legend-" + p[0]));
    });
    var ch = cell(tr, "");
    ch.appendChild(chart(r.history, r.interval_s, r.window_s));
    return tr;
  }

  var SVG = "http://www.w3.org/2000/svg";

  // chart draws the window's samples, the newest at the right edge and
  // the whole window wide, so a young stream's line grows from the right.
  function chart(hist, interval, window) {
    var W = 240, H = 56;
    var svg = document.createElementNS(SVG, "svg");
    svg.setAttribute("class", "chart");
    svg.setAttribute("width", W);
    svg.setAttribute("height", H);
    svg.setAttribute("viewBox", "0 0 " + W + " " + H);
    var to = (hist && hist.to_wan_Bps) || [], from = (hist && hist.from_wan_Bps) || [];
    var peak = Math.max.apply(null, [1].concat(to, from));
    var n = Math.max(2, to.length, Math.round((window || 0) / (interval || 1)));
    [["to", to], ["from", from]].forEach(function (p) {
      if (!p[1].length) { return; }
      var skip = n - p[1].length;
      var pts = p[1].map(function (y, i) {
        return ((skip + i) * (W - 2) / (n - 1) + 1).toFixed(1) + "," + (H - 12 - y / peak * (H - 16)).toFixed(1);
      });
      var line = document.createElementNS(SVG, "polyline");
      line.setAttribute("class", p[0]);
      line.setAttribute("points", pts.join(" "));
      svg.appendChild(line);
    });
    var label = document.createElementNS(SVG, "text");
    label.setAttribute("x", 2);
    label.setAttribute("y", H - 2);
    label.setAttribute("font-size", 9);
    label.setAttribute("fill", "#5c6b7a");
    label.textContent = "peak " + rate(peak) + " · the last " + Math.round(n * (interval || 1)) + " s";
    svg.appendChild(label);
    return svg;
  }

  $("login-form").addEventListener("submit", function (ev) {
    ev.preventDefault();
    var t = $("token").value.trim();
    $("token").value = "";
    if (!t) { showLogin("Give the token."); return; }
    try { sessionStorage.setItem(KEY, t); } catch (e) {
      showLogin("This browser keeps no session storage here; the page cannot hold the token.");
      return;
    }
    say("");
    poll();
  });
  $("forget").addEventListener("click", function () { forget("Token forgotten."); });

  if (token()) { poll(); } else { showLogin(""); }
}());
