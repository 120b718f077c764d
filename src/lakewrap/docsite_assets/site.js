// lakewrap docs: search, the graph's pan and zoom, the column lineage panel. Vanilla JS, no network.
(function () {
  "use strict";
  var root = document.body.getAttribute("data-root") || "";

  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined) { node.textContent = text; }
    return node;
  }

  // --- search -------------------------------------------------------------------------------------
  var input = document.getElementById("search");
  var results = document.getElementById("search-results");
  var index = window.LAKEWRAP_INDEX || [];

  function score(entry, words) {
    var name = entry.name.toLowerCase();
    var text = [name, entry.kind, entry.description, entry.columns.join(" "), entry.tags.join(" ")]
      .join(" ").toLowerCase();
    var total = 0;
    for (var i = 0; i < words.length; i++) {
      if (text.indexOf(words[i]) < 0) { return 0; }
      total += name.indexOf(words[i]) >= 0 ? 10 : 1;
    }
    return total;
  }

  function search() {
    var words = input.value.toLowerCase().split(/\s+/).filter(Boolean);
    results.innerHTML = "";
    if (!words.length) { results.hidden = true; return; }
    var hits = index.map(function (e) { return [score(e, words), e]; })
      .filter(function (p) { return p[0] > 0; })
      .sort(function (a, b) { return b[0] - a[0] || a[1].name.localeCompare(b[1].name); })
      .slice(0, 20);
    if (!hits.length) {
      results.appendChild(el("li", { "class": "none" }, "nothing matches"));
    }
    hits.forEach(function (p) {
      var li = el("li");
      var a = el("a", { href: root + p[1].href, "class": "hit" }, p[1].name);
      li.appendChild(a);
      li.appendChild(el("span", { "class": "muted" }, " " + p[1].kind));
      results.appendChild(li);
    });
    results.hidden = false;
  }

  if (input) {
    input.addEventListener("input", search);
    input.addEventListener("keydown", function (ev) {
      if (ev.key === "Enter") {
        var first = results.querySelector("a.hit");
        if (first) { window.location.href = first.getAttribute("href"); }
      } else if (ev.key === "Escape") {
        input.value = ""; search();
      }
    });
  }

  // --- the graph: pan and zoom ----------------------------------------------------------------------
  var svg = document.getElementById("graph");
  if (svg) {
    var full = { x: 0, y: 0, w: +svg.getAttribute("data-width"), h: +svg.getAttribute("data-height") };
    var box = { x: full.x, y: full.y, w: full.w, h: full.h };
    var apply = function () { svg.setAttribute("viewBox", [box.x, box.y, box.w, box.h].join(" ")); };
    var zoom = function (factor, cx, cy) {
      cx = cx === undefined ? box.x + box.w / 2 : cx;
      cy = cy === undefined ? box.y + box.h / 2 : cy;
      box.x = cx - (cx - box.x) * factor; box.y = cy - (cy - box.y) * factor;
      box.w *= factor; box.h *= factor; apply();
    };
    var toGraph = function (ev) {
      var r = svg.getBoundingClientRect();
      return { x: box.x + (ev.clientX - r.left) / r.width * box.w, y: box.y + (ev.clientY - r.top) / r.height * box.h };
    };
    svg.addEventListener("wheel", function (ev) {
      ev.preventDefault();
      var p = toGraph(ev);
      zoom(ev.deltaY > 0 ? 1.15 : 1 / 1.15, p.x, p.y);
    }, { passive: false });
    var drag = null;
    var moved = false;
    svg.addEventListener("pointerdown", function (ev) {
      drag = { x: ev.clientX, y: ev.clientY, bx: box.x, by: box.y }; moved = false;
    });
    window.addEventListener("pointermove", function (ev) {
      if (!drag) { return; }
      var r = svg.getBoundingClientRect();
      var dx = ev.clientX - drag.x, dy = ev.clientY - drag.y;
      if (Math.abs(dx) + Math.abs(dy) > 4) { moved = true; svg.classList.add("panning"); }
      if (moved) {
        box.x = drag.bx - dx / r.width * box.w; box.y = drag.by - dy / r.height * box.h; apply();
      }
    });
    window.addEventListener("pointerup", function () { drag = null; svg.classList.remove("panning"); });
    svg.addEventListener("click", function (ev) { if (moved) { ev.preventDefault(); moved = false; } }, true);
    document.querySelectorAll("[data-zoom]").forEach(function (b) {
      b.addEventListener("click", function () {
        var what = b.getAttribute("data-zoom");
        if (what === "in") { zoom(1 / 1.25); } else if (what === "out") { zoom(1.25); }
        else { box = { x: full.x, y: full.y, w: full.w, h: full.h }; apply(); }
      });
    });
    // hovering a node highlights its edges
    svg.querySelectorAll("a.node").forEach(function (n) {
      var key = n.getAttribute("data-key");
      var mark = function (on) {
        svg.querySelectorAll("path.edge").forEach(function (e) {
          if (e.getAttribute("data-from") === key || e.getAttribute("data-to") === key) {
            e.classList.toggle("lit", on);
          }
        });
      };
      n.addEventListener("mouseenter", function () { mark(true); });
      n.addEventListener("mouseleave", function () { mark(false); });
    });
  }

  // --- the column lineage panel -------------------------------------------------------------------
  var dataEl = document.getElementById("lineage-data");
  if (dataEl) {
    var lineage = JSON.parse(dataEl.textContent);
    var pages = JSON.parse(document.getElementById("pages-data").textContent);
    var body = document.getElementById("lineage-body");

    var tree = function (step) {
      var li = el("li", { "class": "step " + step.kind });
      var key = step.relation.toLowerCase();
      var label = el("a", { href: root + (pages[key] || "#"), "class": "col" }, step.column);
      var short = step.column.split(".").pop();
      li.appendChild(label);
      if (step.via && step.via.length) { li.appendChild(el("span", { "class": "muted" }, " via " + step.via.join(", "))); }
      var bare = (step.expression || "").toLowerCase().split(".").pop().replace(/"/g, "") === short;
      if (step.expression && step.kind === "model" && !bare) {
        li.appendChild(el("code", { "class": "expr" }, " = " + step.expression));
      }
      li.appendChild(el("span", { "class": "kind" }, " " + step.kind));
      if (step.next && step.next.length) {
        var ul = el("ul");
        step.next.forEach(function (n) { ul.appendChild(tree(n)); });
        li.appendChild(ul);
      }
      return li;
    };

    var show = function (column) {
      var info = lineage[column];
      body.innerHTML = "";
      document.querySelectorAll("button.column").forEach(function (b) {
        b.classList.toggle("chosen", b.getAttribute("data-column") === column);
      });
      if (!info) { body.appendChild(el("p", { "class": "muted" }, "no lineage for this column")); return; }
      document.getElementById("lineage-hint").hidden = true;
      var srcs = el("p", { "class": "sources" });
      srcs.appendChild(el("strong", {}, "Source columns: "));
      if (!info.sources.length) { srcs.appendChild(el("span", { "class": "muted" }, "none (computed from no column)")); }
      info.sources.forEach(function (s, i) {
        var rel = s.substring(0, s.lastIndexOf(".")).toLowerCase();
        if (i) { srcs.appendChild(document.createTextNode(", ")); }
        srcs.appendChild(el("a", { href: root + (pages[rel] || "#"), "class": "source-column" }, s));
      });
      body.appendChild(srcs);
      if (info.upstream.expression) {
        var how = el("p", { "class": "computed" });
        how.appendChild(el("strong", {}, "Computed as: "));
        how.appendChild(el("code", {}, info.upstream.expression));
        body.appendChild(how);
      }
      [["Upstream", info.upstream], ["Downstream", info.downstream]].forEach(function (pair) {
        var sec = el("div", { "class": "lineage-" + pair[0].toLowerCase() });
        sec.appendChild(el("h3", {}, pair[0] + " of " + column));
        if (!pair[1].next.length) {
          sec.appendChild(el("p", { "class": "muted" }, pair[0] === "Upstream" ? "reads no column" : "no model reads it"));
        } else {
          var ul = el("ul", { "class": "tree" });
          pair[1].next.forEach(function (n) { ul.appendChild(tree(n)); });
          sec.appendChild(ul);
        }
        body.appendChild(sec);
      });
      if (window.history && window.history.replaceState) { window.history.replaceState(null, "", "#column=" + column); }
    };

    document.querySelectorAll("button.column").forEach(function (b) {
      b.addEventListener("click", function () { show(b.getAttribute("data-column")); });
    });
    var m = /#column=(.+)$/.exec(window.location.hash);
    if (m && lineage[decodeURIComponent(m[1])]) { show(decodeURIComponent(m[1])); }
  }
})();
