// The graph page of defun's df.view / `defun view`: reads the graph from #graph-data, lays
// each top-level group (forward, backward) out with dagre, draws it as SVG. Groups (calls,
// cond branches, loop bodies, forward, backward) open and close; a node shows its op, output
// type and notes; clicking it shows its IR line, attributes, source line and profile.
// The URL fragment says what is open: #open=ID,ID (or all), #closed=ID,ID, #select=ID,
// #zoom=fit (or a scale: 0.5), #find=TEXT (nodes whose op, name or line has it, marked).
(function () {
  "use strict";
  var SVGNS = "http://www.w3.org/2000/svg";
  var data = JSON.parse(document.getElementById("graph-data").textContent);
  var groups = new Map(), nodes = new Map(), kids = new Map(), isOpen = new Map();
  data.groups.forEach(function (g) { groups.set(g.id, g); kids.set(g.id, {groups: [], nodes: []}); isOpen.set(g.id, g.open); });
  data.groups.forEach(function (g) { if (g.parent) kids.get(g.parent).groups.push(g.id); });
  data.nodes.forEach(function (n) { nodes.set(n.id, n); kids.get(n.g).nodes.push(n.id); });
  var tops = data.groups.filter(function (g) { return !g.parent; }).map(function (g) { return g.id; });
  var scale = 1, selected = null, query = "", zoom = null;
  var MAX_FANOUT = 4;     // readers an input, variable or constant is joined to before it is copied
  var measure = document.createElement("canvas").getContext("2d");

  function el(name, attrs, parent) {
    var e = document.createElementNS(SVGNS, name);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function html(tag, text, cls) {
    var e = document.createElement(tag);
    if (text !== undefined) e.textContent = text;
    if (cls) e.className = cls;
    return e;
  }
  function count(gid) {
    var k = kids.get(gid), n = k.nodes.length;
    k.groups.forEach(function (s) { n += count(s); });
    return n;
  }
  function topOf(gid) { while (groups.get(gid).parent) gid = groups.get(gid).parent; return gid; }
  function openUp(gid) { while (gid) { isOpen.set(gid, true); gid = groups.get(gid).parent; } }

  // --- the URL fragment: what is open, what is selected
  function readFragment() {
    var hash = decodeURIComponent(location.hash.replace(/^#/, ""));
    hash.split("&").forEach(function (part) {
      var eq = part.indexOf("="), key = part.slice(0, eq), ids = eq < 0 ? [] : part.slice(eq + 1).split(",");
      ids = ids.filter(function (s) { return s.length; });
      if (key === "open") ids.forEach(function (id) {
        if (id === "all") groups.forEach(function (g, gid) { isOpen.set(gid, true); });
        else if (groups.has(id)) openUp(id);
      });
      if (key === "closed") ids.forEach(function (id) { if (groups.has(id)) isOpen.set(id, false); });
      if (key === "select" && nodes.has(ids[0])) { selected = ids[0]; openUp(nodes.get(selected).g); }
      if (key === "find") { query = part.slice(eq + 1); document.getElementById("find").value = query; }
      if (key === "zoom" && ids.length) zoom = ids[0] === "fit" ? "fit" : (parseFloat(ids[0]) || 1);
    });
  }
  function writeFragment() {
    var open = [], closed = [];
    groups.forEach(function (g, gid) {
      if (isOpen.get(gid) !== g.open) (isOpen.get(gid) ? open : closed).push(encodeURIComponent(gid));
    });
    var parts = [];
    if (open.length) parts.push("open=" + open.join(","));
    if (closed.length) parts.push("closed=" + closed.join(","));
    if (selected) parts.push("select=" + encodeURIComponent(selected));
    try {
      history.replaceState(null, "", parts.length ? "#" + parts.join("&") : location.pathname + location.search);
    } catch (e) { /* a page shown in a notebook's frame (srcdoc) has no URL of its own to set */ }
  }

  // --- what is drawn: a node, or the closed group standing for it
  function shown(id) {
    var chain = [], g = nodes.get(id).g;
    while (g) { chain.push(g); g = groups.get(g).parent; }
    for (var i = chain.length - 1; i >= 0; i--) {
      if (!isOpen.get(chain[i])) {
        var owner = groups.get(chain[i]).owner;
        return owner ? shown(owner) : "group:" + chain[i];
      }
    }
    return id;
  }

  function lines(n) {
    var head = n.title;
    if (n.opens) head = (isOpen.get(n.opens) ? "\u25BE " : "\u25B8 ") + head;
    var out = [{text: head, cls: "t"}];
    if (n.type) out.push({text: n.type, cls: "y"});
    (n.notes || []).forEach(function (t) { out.push({text: t, cls: "m"}); });
    if (n.prof) out.push({text: n.prof.text, cls: "p"});
    return out;
  }
  function boxSize(ls) {
    var w = 0;
    ls.forEach(function (l) {
      measure.font = l.cls === "t" ? "bold 12px sans-serif" : "11px sans-serif";
      w = Math.max(w, measure.measureText(l.text).width);
    });
    return {width: Math.ceil(w) + 18, height: 8 + 14 * ls.length};
  }

  // --- layout of one top-level group
  function layout(top) {
    var g = new dagre.graphlib.Graph({compound: true});
    g.setGraph({rankdir: "TB", nodesep: 16, ranksep: 24, edgesep: 10, marginx: 12, marginy: 12});
    g.setDefaultEdgeLabel(function () { return {}; });
    function proxy(gid, parent) {
      var gr = groups.get(gid), ls = [{text: "\u25B8 " + gr.label, cls: "t"}, {text: count(gid) + " nodes", cls: "m"}];
      var size = boxSize(ls);
      g.setNode("group:" + gid, {width: size.width, height: size.height, lines: ls, group: gid});
      if (parent) g.setParent("group:" + gid, parent);
    }
    function add(gid, parent) {
      kids.get(gid).nodes.forEach(function (id) {
        var ls = lines(nodes.get(id)), size = boxSize(ls);
        g.setNode(id, {width: size.width, height: size.height, lines: ls, node: id});
        if (parent) g.setParent(id, parent);
      });
      kids.get(gid).groups.forEach(function (s) {
        if (isOpen.get(s) && groups.get(s).owner) {
          add(s, parent);      // a node's functions: each its own box, beside each other
        } else if (isOpen.get(s)) {
          var cid = "cluster:" + s;
          g.setNode(cid, {cluster: s});
          if (parent) g.setParent(cid, parent);
          add(s, cid);
          if (!g.children(cid).length) g.removeNode(cid);
        } else if (!groups.get(s).owner) proxy(s, parent);
      });
    }
    if (isOpen.get(top)) add(top, null); else proxy(top, null);
    var seen = new Set(), edges = [], fanout = new Map();
    data.edges.forEach(function (e) {
      if (topOf(nodes.get(e.s).g) !== top || topOf(nodes.get(e.t).g) !== top) return;
      var s = shown(e.s), t = shown(e.t), key = s + "\n" + t;
      if (s === t || seen.has(key) || !g.hasNode(s) || !g.hasNode(t)) return;
      seen.add(key);
      edges.push([s, t, {kind: e.kind, tip: e.tip, hidden: e.kind === "runs"}]);
      if (e.kind !== "runs") fanout.set(s, (fanout.get(s) || 0) + 1);
    });
    edges.forEach(function (st) {
      var s = st[0], n = nodes.get(s);
      // an input, variable or constant read in many places: a small copy beside each reader
      // (its edges would cross the whole graph), the node itself stays, unjoined
      if (n && !st[2].hidden && (n.kind === "arg" || n.kind === "var" || n.kind === "const") && fanout.get(s) > MAX_FANOUT) {
        var ref = "ref:" + s + "\n" + st[1], ls = [{text: n.title, cls: "t"}], size = boxSize(ls);
        g.setNode(ref, {width: size.width, height: size.height - 6, lines: ls, node: s, ref: true});
        var parent = g.parent(st[1]);
        if (parent) g.setParent(ref, parent);
        s = ref;
      }
      g.setEdge(s, st[1], st[2]);
    });
    dagre.layout(g);
    return g;
  }

  // --- drawing
  function drawGroupBox(layer, g, id, dx) {
    var v = g.node(id), gr = groups.get(v.cluster);
    var box = el("g", {"class": "group kind-" + gr.kind, "data-group": gr.id}, layer);
    // the label sits in a band above the box's first rank (dagre leaves ranksep there)
    el("rect", {x: v.x - v.width / 2 + dx, y: v.y - v.height / 2 - 12, width: v.width, height: v.height + 12, rx: 6}, box);
    var label = el("text", {x: v.x - v.width / 2 + dx + 6, y: v.y - v.height / 2 + 1, "class": "glabel"}, box);
    var owner = gr.parent && groups.get(gr.parent).owner ? groups.get(gr.parent) : null;
    label.textContent = "\u25BE " + (owner ? owner.label + " \u00B7 " : "") + gr.label;
    label.addEventListener("click", function (ev) { ev.stopPropagation(); toggle(owner ? owner.id : gr.id); });
  }
  function drawRuns(layer, g, id, dx) {
    // a dotted line from a node to the box of a function it runs, ending in a circle
    var v = g.node(id), gr = groups.get(v.cluster), parent = gr.parent ? groups.get(gr.parent) : null;
    if (!parent || !parent.owner || !g.hasNode(parent.owner)) return;
    var o = g.node(parent.owner), x1 = o.x + dx, y1 = o.y + o.height / 2;
    var x2 = Math.min(Math.max(x1, v.x - v.width / 2 + dx + 12), v.x + v.width / 2 + dx - 12), y2 = v.y - v.height / 2 - 12;
    el("path", {d: "M" + x1 + "," + y1 + " L" + x2 + "," + (y2 - 4), "class": "edge kind-runs",
                "data-from": parent.owner, "data-to": "cluster:" + gr.id}, layer);
    el("circle", {cx: x2, cy: y2 - 2, r: 3, "class": "runsend"}, layer);
  }
  function drawNode(layer, g, id, dx) {
    var v = g.node(id), n = v.node ? nodes.get(v.node) : null;
    var cls = n ? "node kind-" + n.kind : "node proxy";
    if (n && n.out) cls += " out";
    if (n && n.side && n.side.length) cls += " side";
    if (n && n.reads && n.reads.length) cls += " reads";
    if (n && n.opens) cls += " opens";
    if (v.ref) cls += " ref";
    var box = el("g", {"class": cls, transform: "translate(" + (v.x - v.width / 2 + dx) + "," + (v.y - v.height / 2) + ")"}, layer);
    if (v.ref) box.setAttribute("data-ref", n.id);
    else if (n) { box.setAttribute("data-id", n.id); box.setAttribute("id", "node:" + n.id); }
    else box.setAttribute("data-group", v.group);
    var round = n && (n.kind === "arg" || n.kind === "var" || n.kind === "const") ? 12 : 3;
    el("rect", {width: v.width, height: v.height, rx: round}, box);
    if (n && n.prof) {
      el("rect", {"class": "heat", x: 1, y: v.height - 4, height: 3, width: Math.max(2, (v.width - 2) * n.prof.share)}, box);
    }
    v.lines.forEach(function (l, k) {
      var t = el("text", {x: v.width / 2, y: (v.ref ? 12 : 16) + 14 * k, "class": l.cls}, box);
      t.textContent = l.text;
    });
    if (n) {
      var tip = el("title", {}, box);
      tip.textContent = n.ir + (n.site ? "\n" + n.site + (n.src ? ": " + n.src : "") : "");
    }
    box.addEventListener("click", function (ev) {
      ev.stopPropagation();
      if (!n) { toggle(v.group); return; }
      if (n.opens && (ev.target.tagName === "text" && ev.target.classList.contains("t"))) toggle(n.opens);
      select(n.id);
    });
  }
  function drawEdge(layer, g, e, dx) {
    var info = g.edge(e);
    if (info.hidden) return;
    var pts = info.points.map(function (p) { return [p.x + dx, p.y]; });
    var path = smooth(pts);
    var line = el("path", {d: path, "class": "edge kind-" + info.kind, "marker-end": "url(#arrow)",
                           "data-from": e.v, "data-to": e.w}, layer);
    if (info.tip) el("title", {}, line).textContent = info.tip;
  }
  function smooth(pts) {
    // a uniform cubic B-spline through the layout's bend points, its ends on the first and
    // last point: bends become curves instead of sharp zigzags
    var f = function (v) { return Math.round(v * 10) / 10; };
    var d = "M" + f(pts[0][0]) + "," + f(pts[0][1]);
    if (pts.length < 3) return d + " L" + f(pts[pts.length - 1][0]) + "," + f(pts[pts.length - 1][1]);
    var p = [pts[0]].concat(pts, [pts[pts.length - 1]]);
    d += " L" + f((5 * p[0][0] + p[1][0]) / 6) + "," + f((5 * p[0][1] + p[1][1]) / 6);
    for (var i = 2; i < p.length; i++) {
      var a = p[i - 2], b = p[i - 1], c = p[i];
      d += " C" + f((2 * a[0] + b[0]) / 3) + "," + f((2 * a[1] + b[1]) / 3) + " " +
           f((a[0] + 2 * b[0]) / 3) + "," + f((a[1] + 2 * b[1]) / 3) + " " +
           f((a[0] + 4 * b[0] + c[0]) / 6) + "," + f((a[1] + 4 * b[1] + c[1]) / 6);
    }
    var last = pts[pts.length - 1];
    return d + " L" + f(last[0]) + "," + f(last[1]);
  }

  function render() {
    var svg = document.getElementById("graph");
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    var defs = el("defs", {}, svg);
    var marker = el("marker", {id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7,
                               markerHeight: 7, orient: "auto-start-reverse"}, defs);
    el("path", {d: "M0,0 L10,5 L0,10 z", "class": "arrowhead"}, marker);
    var x = 0, height = 0;
    tops.forEach(function (top) {
      var g = layout(top), w = g.graph().width, h = g.graph().height;
      var frame = el("g", {"class": "top", "data-top": top}, svg);
      var gr = groups.get(top);
      if (isOpen.get(top)) {
        el("rect", {x: x + 2, y: 2, width: w - 4, height: h + 18, rx: 8, "class": "topframe"}, frame);
        var label = el("text", {x: x + 10, y: 16, "class": "toplabel"}, frame);
        label.textContent = "\u25BE " + gr.label;
        label.addEventListener("click", function (ev) { ev.stopPropagation(); toggle(top); });
      }
      var body = el("g", {transform: "translate(0,20)"}, frame);
      var clusters = g.nodes().filter(function (id) { return g.node(id).cluster; });
      clusters.sort(function (a, b) { return depth(a) - depth(b); });
      clusters.forEach(function (id) { drawGroupBox(body, g, id, x); });
      clusters.forEach(function (id) { drawRuns(body, g, id, x); });
      g.edges().forEach(function (e) { drawEdge(body, g, e, x); });
      g.nodes().forEach(function (id) { if (!g.node(id).cluster) drawNode(body, g, id, x); });
      x += w + 24;
      height = Math.max(height, h + 24);
      function depth(id) { var k = 0, p = g.parent(id); while (p) { k++; p = g.parent(p); } return k; }
    });
    svg.setAttribute("viewBox", "0 0 " + Math.max(x, 1) + " " + Math.max(height, 1));
    svg.dataset.width = x; svg.dataset.height = height;
    applyScale();
    highlight();
    var shownCount = svg.querySelectorAll("g.node[data-id]").length;
    document.getElementById("status").textContent = shownCount + " of " + data.nodes.length + " nodes shown";
    document.body.setAttribute("data-shown", shownCount);
  }
  function applyScale() {
    var svg = document.getElementById("graph");
    svg.setAttribute("width", Math.round(svg.dataset.width * scale));
    svg.setAttribute("height", Math.round(svg.dataset.height * scale));
  }
  function fit() {
    var svg = document.getElementById("graph"), box = document.getElementById("canvas");
    scale = Math.min(1.25, (box.clientWidth - 8) / svg.dataset.width, (box.clientHeight - 8) / svg.dataset.height);
    scale = Math.max(scale, 0.05);
    applyScale();
  }

  function toggle(gid) { isOpen.set(gid, !isOpen.get(gid)); writeFragment(); render(); }
  function setAll(open) {
    groups.forEach(function (g, gid) { isOpen.set(gid, open || !g.parent); });
    writeFragment(); render();
  }

  // --- selection: the details panel and the related nodes marked
  function related(n) {
    var ids = new Set();
    if (!n) return ids;
    (n.side || []).forEach(function (k) {
      data.nodes.forEach(function (m) { if ((m.reads || []).indexOf(k) >= 0) ids.add(m.id); });
    });
    (n.reads || []).forEach(function (k) {
      data.nodes.forEach(function (m) { if ((m.side || []).indexOf(k) >= 0) ids.add(m.id); });
    });
    ids.forEach(function (id) {
      if ((nodes.get(id).reads || []).length) data.edges.forEach(function (e) { if (e.s === id) ids.add(e.t); });
    });
    return ids;
  }
  function highlight() {
    var n = selected ? nodes.get(selected) : null, rel = related(n);
    var q = query.toLowerCase();
    document.querySelectorAll("g.node[data-id], g.node[data-ref]").forEach(function (e) {
      var id = e.getAttribute("data-id") || e.getAttribute("data-ref"), m = nodes.get(id);
      e.classList.toggle("sel", id === selected);
      e.classList.toggle("rel", rel.has(id));
      e.classList.toggle("hit", !!q && (m.title + " " + m.name + " " + (m.site || "")).toLowerCase().indexOf(q) >= 0);
    });
  }
  function select(id) {
    selected = id;
    writeFragment();
    highlight();
    details(nodes.get(id));
  }
  function details(n) {
    var panel = document.getElementById("details");
    panel.innerHTML = "";
    if (!n) { panel.appendChild(html("p", "Click a node for its details.", "hint")); return; }
    panel.appendChild(html("h2", n.name + "  " + n.op));
    panel.appendChild(html("div", groups.get(n.g).path, "where"));
    panel.appendChild(html("pre", n.ir, "ir"));
    if (n.site) {
      var src = html("div", "", "src");
      src.appendChild(html("span", n.site, "site"));
      if (n.src) src.appendChild(html("code", n.src));
      panel.appendChild(src);
    }
    var table = html("table");
    function row(k, v) { var tr = html("tr"); tr.appendChild(html("th", k)); tr.appendChild(html("td", v)); table.appendChild(tr); }
    (n.outputs || []).forEach(function (o, k) { row(n.outputs.length > 1 ? "output " + k : "output", o.dtype + " " + o.shape); });
    (n.attrs || []).forEach(function (a) { row(a[0], a[1]); });
    (n.notes || []).forEach(function (t) { row("", t); });
    if (n.prof) row("profile", n.prof.detail);
    panel.appendChild(table);
    var rel = related(n);
    if (rel.size) {
      panel.appendChild(html("p", (n.side && n.side.length ? "read by the backward at: " : "saved by the forward at: ") +
        Array.from(rel).map(function (id) { return nodes.get(id).name + " " + nodes.get(id).op; }).join(", "), "rel"));
    }
    if (n.opens) {
      var b = html("button", isOpen.get(n.opens) ? "close its functions" : "open its functions");
      b.addEventListener("click", function () { toggle(n.opens); details(n); });
      panel.appendChild(b);
    }
  }

  function setup() {
    document.getElementById("title").textContent = data.title;
    document.getElementById("summary").textContent = data.summary;
    document.getElementById("expand").addEventListener("click", function () { setAll(true); });
    document.getElementById("collapse").addEventListener("click", function () { setAll(false); });
    document.getElementById("fit").addEventListener("click", fit);
    document.getElementById("zoomin").addEventListener("click", function () { scale *= 1.25; applyScale(); });
    document.getElementById("zoomout").addEventListener("click", function () { scale /= 1.25; applyScale(); });
    document.getElementById("find").addEventListener("input", function (ev) { query = ev.target.value; highlight(); });
    document.getElementById("canvas").addEventListener("wheel", function (ev) {
      if (!ev.ctrlKey) return;
      ev.preventDefault();
      scale *= ev.deltaY < 0 ? 1.1 : 1 / 1.1;
      applyScale();
    }, {passive: false});
    window.addEventListener("hashchange", function () { readFragment(); render(); details(selected ? nodes.get(selected) : null); });
    readFragment();
    render();
    if (zoom === "fit") fit();
    else if (zoom) { scale = Math.min(Math.max(zoom, 0.05), 8); applyScale(); }
    details(selected ? nodes.get(selected) : null);
    if (selected) {
      var e = document.getElementById("node:" + selected);
      if (e) e.scrollIntoView({block: "center", inline: "center"});
    }
    document.body.setAttribute("data-ready", "1");
  }
  window.defunView = {toggle: toggle, select: select, isOpen: function (gid) { return isOpen.get(gid); }};
  setup();
})();
