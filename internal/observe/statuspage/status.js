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

  // rate is a rate in bytes per second, in the decimal unit its size
  // calls for (B/s, kB/s, MB/s, GB/s); 0 is "0 B/s".
  function rate(bps) {
    var n = Number(bps || 0), units = ["B/s", "kB/s", "MB/s", "GB/s", "TB/s"], i = 0;
    while (n >= 1000 && i < units.length - 1) { n /= 1000; i++; }
    return (i === 0 ? n.toFixed(0) : n.toFixed(n < 10 ? 2 : 1)) + " " + units[i];
  }

  // stat says a mean ± standard deviation (and peak): "idle" when
  // nothing moved, no spread when there was none, "none yet" without a
  // sample.
  function stat(s, peak) {
    if (!s || !s.samples) { return "none yet"; }
    if (!s.mean_Bps && !s.peak_Bps) { return "idle"; }
    var t = rate(s.mean_Bps);
    if (s.stddev_Bps > 0.0005 * s.mean_Bps) { t += " ± " + rate(s.stddev_Bps); }
    if (peak) { t += ", peak " + rate(s.peak_Bps); }
    return t;
  }

  // short is a UID's first 8 characters, as git shortens a hash.
  function short(uid) { uid = String(uid || ""); return uid.length > 9 ? uid.slice(0, 8) + "…" : uid; }

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
        forget("The gateway refused the token: " + (msg || "unauthenticated") +
          ". Give the bearer token you use with s2uc on this gateway (from s2uc login, or the one its operator gave you).");
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
    var up = (new Date(st.now) - new Date(st.started)) / 1000;
    $("gw-summary").textContent = "listener " + st.listener_ip + " · version " + st.version + " · up " + duration(up) + " · " +
      (h.ready ? "ready" : "NOT READY");
    $("gw-summary").className = "summary " + (h.ready ? "ok" : "bad");

    $("scope").textContent = st.scope === "all"
      ? "Every identity's streams: " + st.identity + " is a reader or an operator of this gateway."
      : "The streams of " + st.identity + " only (a reader or an operator sees every identity's).";

    var dl = $("health");
    dl.replaceChildren();
    var s = h.streams;
    dd(dl, "streams live", s.connected + " connected, " + s.wired + " wired (no data yet), " + s.listening + " listening, " +
      s.requested + " being created");
    dd(dl, "streams ended", s.released + " released, " + s.expired + " expired, " + s.failed + " failed");
    dd(dl, "data ports", h.ports_in_use + " of " + h.ports_capacity + " in use");
    dd(dl, "connection files", h.conn_files_in_use + " of " + h.conn_files_capacity + " in use");
    var w = h.wan_conns;
    dd(dl, "WAN connections", w.relaying + " relaying, " + w.waiting + " waiting for their application, " + w.handshake + " in their handshake");
    dd(dl, "pooled WAN legs", h.pooled_legs.idle + " idle, " + h.pooled_legs.busy + " busy");
    dd(dl, "resuming connections", (h.parked_conns || 0) + " waiting, parked, for a new WAN leg", h.parked_conns ? "resuming" : "");
    dd(dl, "resume buffer", bytes(h.resume_buffer_bytes) + " held of " + bytes(h.resume_buffer_capacity_bytes) +
      " (peak " + bytes(h.resume_buffer_peak_bytes) + ")");
    var e = h.api_errors;
    dd(dl, "authentication failures", e.unauthenticated, e.unauthenticated ? "bad" : "");
    dd(dl, "admission refusals", e.no_resources, e.no_resources ? "bad" : "");
    var refused = Object.keys(h.refused).filter(function (k) { return h.refused[k] > 0; })
      .map(function (k) { return h.refused[k] + " " + k; });
    dd(dl, "connections refused", refused.length ? refused.join(", ") : "none");

    var tb = $("stream-rows");
    tb.replaceChildren();
    st.streams.forEach(function (v) { tb.appendChild(row(v)); });
    // The window's span, in the column's heading: "last 60 s".
    var ws = st.streams.length && st.streams[0].stats && st.streams[0].stats.rates ? st.streams[0].stats.rates.window_s : 0;
    $("window-head").textContent = (ws ? "last " + Math.round(ws) + " s" : "recent") + ": mean ± sd, peak";
    $("stream-count").textContent = "(" + st.streams.length + " live)";
    $("updated").textContent = new Date(st.now).toLocaleTimeString();
  }

  // wired explains a wired stream's state cell: a tooltip says what
  // wired means, with the latest failed connection (a wrong peer
  // listener shows there), and a line below says no data has passed.
  function wired(td, errs) {
    var tip = "Wired: both gateways know each other, but no data has passed on this gateway yet. " +
      "It turns connected at the first connection whose data leg works here.";
    var last = null;
    Object.keys(errs || {}).forEach(function (k) {
      if (!last || new Date(errs[k].time) > new Date(last.time)) { last = { kind: k, time: errs[k].time, reason: errs[k].reason }; }
    });
    if (last) { tip += " Last failure (" + last.kind.replace(/_/g, " ") + ", " + new Date(last.time).toLocaleTimeString() + "): " + last.reason; }
    td.title = tip;
    td.appendChild(el("div", last ? "no data yet: " + last.kind.replace(/_/g, " ") : "no data yet", last ? "sub bad" : "sub"));
  }

  // resumeText says whether a stream's connections outlive a lost WAN
  // leg (stats.resume), as s2uc status says it; before a leg said, what
  // the stream's settings tell, or "" when they do not.
  function resumeText(v, x) {
    var w = v.resume_window_s || 0, win = w < 60 ? w + " s" : duration(w);
    switch (x.resume || "") {
      case "on": return "resume on (up to " + win + ")";
      case "off": return "resume off (the stream's resume window is 0)";
      case "peer_without": return "no resume: the peer gateway's release does not resume";
      case "plaintext": return "no resume: plaintext tcp legs";
      case "pooled": return "no resume: the peer gateway's release does not resume on pooled legs";
    }
    if (v.wan === "tcp") { return "no resume: plaintext tcp legs"; }
    if (!w) { return "resume off (the stream's resume window is 0)"; }
    return "";
  }

  // resumeCounts says what the stream's connections did when their legs
  // were lost, or "" if nothing.
  function resumeCounts(x) {
    var parts = [];
    if (x.resumed_legs) { parts.push(x.resumed_legs + (x.resumed_legs === 1 ? " leg" : " legs") + " resumed"); }
    if (x.resent_bytes) { parts.push(bytes(x.resent_bytes) + " resent"); }
    if (x.parked_seconds) { parts.push(Number(x.parked_seconds).toFixed(1) + " s parked"); }
    if (x.resume_expired) { parts.push(x.resume_expired + " reset after the window"); }
    return parts.join(", ");
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
    // The short UID on one line, the whole one in its title (hover) and
    // in the row's data-uid.
    var id = cell(tr, "", "uid");
    var code = el("code", short(v.uid), "id");
    code.title = v.uid;
    id.appendChild(code);
    id.appendChild(el("div", v.role + " · " + v.wan + " · " + v.engine, "sub"));
    cell(tr, v.owner);
    var parked = x.parked_conns || 0, state;
    if (parked > 0) {
      // A connection waits for a new WAN leg: its application sees a
      // pause, not an end.
      state = cell(tr, "resuming", "resuming");
      state.dataset.parked = parked;
      state.title = "Resuming: " + parked + (parked === 1 ? " connection lost its" : " connections lost their") +
        " WAN leg and " + (parked === 1 ? "waits" : "wait") + ", parked, for a new one within the resume window (" +
        (v.resume_window_s || 0) + " s); the applications see a pause. Past the window both applications are reset.";
      state.appendChild(el("div", parked + (parked === 1 ? " connection waits" : " connections wait") + " for a new WAN leg", "sub"));
    } else {
      state = cell(tr, v.state, v.state === "connected" ? "ok" : v.state === "wired" ? "wired" : "");
      if (v.state === "wired") { wired(state, x.last_errors); }
    }
    if (x.peer) { state.appendChild(el("div", "peer gateway " + x.peer, x.peer === "up" ? "sub" : "sub bad")); }
    var said = resumeText(v, x);
    if (said) {
      var rs = el("div", said, "sub resume");
      rs.dataset.resume = x.resume || "";
      state.appendChild(rs);
    }
    var peers = cell(tr, (v.listeners || []).join(", "));
    peers.appendChild(el("div", "→ " + (v.targets || []).join(", "), "sub"));
    var conns = cell(tr, (x.active_conns || 0) + " active");
    conns.dataset.active = x.active_conns || 0;
    conns.appendChild(el("div", (x.total_conns || 0) + " total, " + (x.waiting_conns || 0) + " waiting, " +
      (x.rejected_conns || 0) + " refused, " + (x.aborted_conns || 0) + " aborted", "sub"));
    var rc = resumeCounts(x);
    if (rc) { conns.appendChild(el("div", rc, x.resume_expired ? "sub resumes bad" : "sub resumes")); }
    var b = cell(tr, bytes(x.bytes_to_wan) + " / " + bytes(x.bytes_from_wan));
    b.dataset.bytesToWan = x.bytes_to_wan || 0;
    b.dataset.bytesFromWan = x.bytes_from_wan || 0;
    b.className = "bytes";
    var now = cell(tr, x.rate_to_wan_Bps || x.rate_from_wan_Bps ? rate(x.rate_to_wan_Bps) + " / " + rate(x.rate_from_wan_Bps) : "idle", "rate");
    now.dataset.rateToWan = x.rate_to_wan_Bps || 0;
    now.dataset.rateFromWan = x.rate_from_wan_Bps || 0;
    var win = cell(tr, "", "window");
    directions(win, r.to_wan.window, r.from_wan.window, true);
    var steady = cell(tr, "", "steady");
    steady.dataset.steadyToWan = r.to_wan.steady.mean_Bps || 0;
    steady.dataset.steadyFromWan = r.from_wan.steady.mean_Bps || 0;
    directions(steady, r.to_wan.steady, r.from_wan.steady, false);
    var ch = cell(tr, "");
    ch.appendChild(chart(r.history, r.interval_s, r.window_s));
    return tr;
  }

  // directions writes one line per direction that carried data, or one
  // word for both when neither did ("idle", "none yet").
  function directions(td, to, from, peak) {
    var t = stat(to, peak), f = stat(from, peak);
    if (t === f && (t === "idle" || t === "none yet")) { td.appendChild(el("div", t, "sub")); return; }
    [["to", t], ["from", f]].forEach(function (p) {
      if (p[1] !== "idle" && p[1] !== "none yet") { td.appendChild(el("div", p[0] + " " + p[1], "legend-" + p[0])); }
    });
  }

  var SVG = "http://www.w3.org/2000/svg";

  // nice is the smallest 1, 2 or 5 times a power of ten at or above v:
  // the top of the chart's scale.
  function nice(v) {
    var p = Math.pow(10, Math.floor(Math.log10(v)));
    for (var m of [1, 2, 5, 10]) { if (m * p >= v) { return m * p; } }
    return 10 * p;
  }

  function svgEl(tag, attrs, text) {
    var e = document.createElementNS(SVG, tag);
    Object.keys(attrs).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (text !== undefined) { e.textContent = text; }
    return e;
  }

  // chart draws the window's samples, the newest at the right edge and
  // the whole window wide, so a young stream's line grows from the right:
  // a rate axis from 0 to a round top, in its unit, and a time axis in
  // seconds before now.
  function chart(hist, interval, window) {
    var W = 300, H = 96, L = 58, R = 6, T = 14, B = 16; // plot area inside the margins
    var pw = W - L - R, ph = H - T - B;
    var svg = svgEl("svg", { "class": "chart", width: W, height: H, viewBox: "0 0 " + W + " " + H, role: "img" });
    var to = (hist && hist.to_wan_Bps) || [], from = (hist && hist.from_wan_Bps) || [];
    // An idle window gets a nominal 1 MB/s scale, not one of a byte.
    var top = nice(Math.max.apply(null, [0].concat(to, from)) || 1e6);
    var n = Math.max(2, to.length, Math.round((window || 0) / (interval || 1)));
    var span = Math.round((n - 1) * (interval || 1));
    svg.appendChild(svgEl("title", {}, "rate to (blue) and from (orange) the WAN over the last " + span + " s"));
    // axes, a mid gridline, tick labels
    svg.appendChild(svgEl("line", { "class": "grid", x1: L, x2: L + pw, y1: T + ph / 2, y2: T + ph / 2 }));
    svg.appendChild(svgEl("line", { "class": "axis", x1: L, x2: L, y1: T, y2: T + ph }));
    svg.appendChild(svgEl("line", { "class": "axis", x1: L, x2: L + pw, y1: T + ph, y2: T + ph }));
    [[top, T], [top / 2, T + ph / 2], [0, T + ph]].forEach(function (t) {
      svg.appendChild(svgEl("text", { "class": "tick", x: L - 4, y: t[1] + 3, "text-anchor": "end" }, rate(t[0])));
    });
    [[-span + " s", L, "start"], [-Math.round(span / 2) + " s", L + pw / 2, "middle"], ["now", L + pw, "end"]].forEach(function (t) {
      svg.appendChild(svgEl("text", { "class": "tick", x: t[1], y: H - 3, "text-anchor": t[2] }, t[0]));
    });
    svg.appendChild(svgEl("text", { "class": "tick legend-to", x: L + 2, y: T - 4 }, "to WAN"));
    svg.appendChild(svgEl("text", { "class": "tick legend-from", x: L + 52, y: T - 4 }, "from WAN"));
    [["to", to], ["from", from]].forEach(function (p) {
      if (!p[1].length) { return; }
      var skip = n - p[1].length;
      var pts = p[1].map(function (y, i) {
        return (L + (skip + i) * pw / (n - 1)).toFixed(1) + "," + (T + ph - y / top * ph).toFixed(1);
      });
      svg.appendChild(svgEl("polyline", { "class": p[0], points: pts.join(" ") }));
    });
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

  // Which gateway: the host and port this page came from.
  document.title = "SciStream gateway " + location.host;
  $("gw-name").textContent = location.host;
  if (token()) { poll(); } else { showLogin(""); }
}());
