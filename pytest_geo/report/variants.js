// One row's rewrites side by side across variants (--geo-variant), best variant first.
// Built from the rows' JSON in the page (geo-rows, further down: hence DOMContentLoaded);
// text goes in with textContent only.
document.addEventListener("DOMContentLoaded", function () {
  "use strict";
  var rows = JSON.parse(document.getElementById("geo-rows").textContent).rows;
  var groups = JSON.parse(document.getElementById("geo-variant-rows").textContent);
  var select = document.getElementById("variant-row");
  var body = document.getElementById("variant-side").tBodies[0];
  var query = document.getElementById("variant-query");

  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function number(value) {
    if (value === null || value === undefined) return "";
    return Number.isInteger(value) ? String(value) : Number(value).toFixed(2);
  }

  // The rewrite with what it added marked, what it dropped struck through.
  function rewriteCell(r) {
    var td = el("td", "text desc");
    if (!r.diff) {
      td.textContent = r.rewritten || "";
      return td;
    }
    r.diff.forEach(function (part) {
      if (part[0] === 0) td.appendChild(document.createTextNode(part[1]));
      else td.appendChild(el(part[0] > 0 ? "ins" : "del", null, part[1]));
    });
    return td;
  }

  function show(index) {
    var group = groups[index];
    body.textContent = "";
    if (!group) return;
    var first = rows[group.variants[0][1]];
    query.textContent = first ? first.query : "";
    group.variants.forEach(function (pair) {
      var r = rows[pair[1]];
      var tr = el("tr", r.error ? "row error" : "row");
      tr.setAttribute("data-variant", pair[0]);
      tr.appendChild(el("td", "", pair[0]));
      tr.appendChild(el("td", "num", number(r.before)));
      tr.appendChild(el("td", "num", number(r.after)));
      tr.appendChild(el("td", "num", number(r.delta)));
      if (r.error) tr.appendChild(el("td", "text bad", r.feedback));
      else tr.appendChild(rewriteCell(r));
      body.appendChild(tr);
    });
  }

  groups.forEach(function (group, i) {
    var option = el("option", null, group.id);
    option.value = String(i);
    select.appendChild(option);
  });
  select.addEventListener("change", function () { show(Number(select.value)); });
  show(0);
});
