// The rows table of a pytest-geo HTML report, built from the JSON in the page.
// Everything from data goes in with textContent, never innerHTML. Only one page of rows
// is in the table at a time; a row's transcript is built when it is expanded.
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("geo-rows").textContent);
  var rows = data.rows, decimals = data.decimals, page = data.page;
  var transcripts = null; // parsed on the first expand: most of the page's bytes
  // When the page embeds only some rows' transcripts (data.transcripts says which file has
  // them all), the user can open that file here: a page opened from disk cannot fetch it.
  var sample = data.transcripts, opened = null; // opened: node id -> the file's line (text)
  var table = document.getElementById("rows-table"), body = table.tBodies[0];
  var headers = table.tHead.rows[0].cells, columns = headers.length;
  var errorsOnly = document.getElementById("errors-only");
  var filter = document.getElementById("row-filter");
  var shown = document.getElementById("rows-shown");
  var more = document.getElementById("show-more");
  var state = { key: null, asc: true, limit: page, view: rows };

  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function number(value, places) {
    return value === null || value === undefined ? "" : Number(value).toFixed(places);
  }

  // One side of the word diff: the shared words plus this side's own, marked.
  function diffCell(parts, own, mark) {
    var td = el("td", "text desc");
    parts.forEach(function (part) {
      if (part[0] === 0) td.appendChild(document.createTextNode(part[1]));
      else if (part[0] === own) td.appendChild(el(mark, null, part[1]));
    });
    return td;
  }

  function rowElement(r) {
    var tr = el("tr", r.error ? "row error" : "row");
    tr.setAttribute("data-i", r.i);
    tr.appendChild(el("td", "num", r.i + 1));
    tr.appendChild(el("td", "", r.suite));
    tr.appendChild(el("td", "id", r.id));
    tr.appendChild(el("td", "text", r.query));
    if (r.diff) {
      tr.appendChild(diffCell(r.diff, -1, "del"));
      tr.appendChild(diffCell(r.diff, 1, "ins"));
    } else {
      tr.appendChild(el("td", "text desc", r.original));
      tr.appendChild(el("td", "text desc", r.rewritten));
    }
    ["before", "after", "delta", "score"].forEach(function (key) {
      tr.appendChild(el("td", "num", number(r[key], decimals[key])));
    });
    tr.appendChild(el("td", r.error ? "text bad" : "text", r.feedback));
    var last = el("td");
    if (r.calls > 0) {
      var button = el("button", "toggle", (r.repeats ? r.repeats + " repeats, " : "") + r.calls + " calls");
      button.type = "button";
      button.setAttribute("aria-expanded", "false");
      last.appendChild(button);
    }
    tr.appendChild(last);
    return tr;
  }

  function callElement(call, strings) {
    var box = el("details", "call");
    box.open = true;
    var label = [call.step, call.role, call.model, "attempt " + call.attempt, call.cached ? "from cache" : "live"];
    if (call.judge) label.splice(2, 0, "judge " + call.judge);
    if (call.error) label.push("failed");
    box.appendChild(el("summary", call.error ? "bad" : "", label.join(" · ")));
    call.messages.forEach(function (message) {
      var text = strings[message[1]];
      if (message[0] === "system") { // long and the same in every call: folded
        var folded = el("details", "msg");
        folded.appendChild(el("summary", "role", "system prompt"));
        folded.appendChild(el("pre", "", text));
        box.appendChild(folded);
      } else {
        var part = el("div", "msg");
        part.appendChild(el("div", "role", message[0]));
        part.appendChild(el("pre", "", text));
        box.appendChild(part);
      }
    });
    var answer = el("div", "msg answer");
    answer.appendChild(el("div", "role", "answer"));
    if (call.answer !== null) answer.appendChild(el("pre", "", strings[call.answer]));
    if (call.error) answer.appendChild(el("pre", "bad", "error: " + call.error));
    box.appendChild(answer);
    return box;
  }

  function transcriptElement(entry, strings) {
    var box = el("div", "transcript");
    if (entry.repeats) {
      if (entry.repeats.length && entry.repeats[0].order) {
        var t = el("table", "repeats"), head = el("tr");
        ["repeat", "candidate order", "before", "after", "improvement", "error"].forEach(function (h) {
          head.appendChild(el("th", "", h));
        });
        t.appendChild(el("thead")).appendChild(head);
        var tb = t.appendChild(el("tbody"));
        entry.repeats.forEach(function (r) {
          var tr = el("tr", r.error ? "error" : "");
          tr.appendChild(el("td", "num", r.repeat));
          tr.appendChild(el("td", "", r.order.join(", ")));
          tr.appendChild(el("td", "num", number(r.before, 0)));
          tr.appendChild(el("td", "num", number(r.after, 0)));
          tr.appendChild(el("td", "num", number(r.delta, 0)));
          tr.appendChild(el("td", "bad", r.error || ""));
          tb.appendChild(tr);
        });
        box.appendChild(t);
      }
      entry.repeats.forEach(function (r) {
        box.appendChild(el("h4", "", "repeat " + r.repeat));
        r.calls.forEach(function (call) { box.appendChild(callElement(call, strings)); });
      });
    } else {
      entry.calls.forEach(function (call) { box.appendChild(callElement(call, strings)); });
    }
    return box;
  }

  // A line of the transcripts file in the shape of the page's own transcripts.
  function fromLine(line) {
    var strings = [];
    function ref(text) { strings.push(String(text)); return strings.length - 1; }
    function call(c) {
      return { step: c.step, role: c.role, model: c.model, attempt: c.attempt, cached: c.cached, error: c.error,
        judge: c.judge,
        messages: (c.messages || []).map(function (m) { return [m.role, ref(m.content)]; }),
        answer: c.answer === null || c.answer === undefined ? null : ref(c.answer) };
    }
    var parsed = JSON.parse(line), entry;
    if (parsed.repeats) { // each repeat's order and ranks too (a file from before them shows the calls alone)
      entry = { repeats: parsed.repeats.map(function (r) {
        return { repeat: r.repeat, order: r.order, before: r.rank_before, after: r.rank_after,
          delta: r.rank_improvement, error: r.error, calls: (r.calls || []).map(call) };
      }) };
    } else {
      entry = { calls: (parsed.calls || []).map(call) };
    }
    return transcriptElement(entry, strings);
  }

  // Read the transcripts file the user picked (gzip JSONL, or the same uncompressed).
  function openFile(file, done) {
    var stream = file.stream();
    if (/\.gz$/i.test(file.name)) stream = stream.pipeThrough(new DecompressionStream("gzip"));
    new Response(stream).text().then(function (text) {
      var lines = new Map();
      text.split("\n").forEach(function (line) {
        var m = /^\{"nodeid":("(?:[^"\\]|\\.)*")/.exec(line);
        if (m) lines.set(JSON.parse(m[1]), line);
      });
      opened = lines;
      done(null);
    }, function (error) { done(error); });
  }

  // With --geo-judge: each judge's ranks and its ranking of the original candidates.
  function judgesElement(judges) {
    var t = el("table", "judges"), head = el("tr");
    ["judge", "before", "after", "improvement", "ranking of the originals", "error"].forEach(function (h) {
      head.appendChild(el("th", "", h));
    });
    t.appendChild(el("thead")).appendChild(head);
    var tb = t.appendChild(el("tbody"));
    judges.forEach(function (j) {
      var tr = el("tr", j[4] ? "error" : "");
      tr.appendChild(el("td", "", j[0]));
      tr.appendChild(el("td", "num", number(j[1], 0)));
      tr.appendChild(el("td", "num", number(j[2], 0)));
      tr.appendChild(el("td", "num", number(j[3], 0)));
      tr.appendChild(el("td", "", j[5].join(", ")));
      tr.appendChild(el("td", "bad", j[4] || ""));
      tb.appendChild(tr);
    });
    return t;
  }

  function rowTranscript(r, td) {
    if (r.judges) td.appendChild(judgesElement(r.judges));
    if (transcripts === null) transcripts = JSON.parse(document.getElementById("geo-transcripts").textContent);
    var entry = transcripts.rows[r.i];
    if (entry) return td.appendChild(transcriptElement(entry, transcripts.strings));
    if (opened !== null && opened.has(r.id)) return td.appendChild(fromLine(opened.get(r.id)));
    var box = el("div", "transcript missing");
    if (!sample || !r.calls) {
      box.appendChild(el("p", "meta", "no model calls recorded for this row"));
    } else if (!sample.file) {
      box.appendChild(el("p", "meta", "This row's model calls are not in this page, and no transcripts file was written."));
    } else {
      box.appendChild(el("p", "meta", "This row's model calls are not in this page (it holds " + sample.embedded +
        " of the rows' transcripts). They are in " + sample.file + ", beside the report: open it to read them" +
        (opened !== null ? " (the file opened has no line for this row)." : ".")));
      var label = el("label", "", "open " + sample.file + " ");
      var input = el("input", "transcripts-file");
      input.type = "file";
      input.accept = ".gz,.jsonl";
      label.appendChild(input);
      box.appendChild(label);
      input.addEventListener("change", function () {
        if (!input.files || !input.files.length) return;
        openFile(input.files[0], function (error) {
          if (error) { box.appendChild(el("p", "bad", "could not read " + input.files[0].name + ": " + error)); return; }
          td.textContent = "";
          rowTranscript(r, td);
        });
      });
    }
    td.appendChild(box);
  }

  function toggle(button) {
    var tr = button.closest("tr"), next = tr.nextElementSibling;
    if (next && next.classList.contains("detail")) {
      next.remove();
      button.setAttribute("aria-expanded", "false");
      return;
    }
    var detail = el("tr", "detail"), td = el("td");
    td.colSpan = columns;
    rowTranscript(rows[Number(tr.getAttribute("data-i"))], td);
    detail.appendChild(td);
    tr.after(detail);
    button.setAttribute("aria-expanded", "true");
  }

  function searchText(r) {
    if (r._text === undefined) {
      var diff = r.diff ? r.diff.map(function (p) { return p[1]; }).join(" ") : r.original + " " + r.rewritten;
      r._text = [r.suite, r.id, r.target, r.query, diff, r.feedback].join(" ").toLowerCase();
    }
    return r._text;
  }

  function compare(a, b) {
    var x = a[state.key], y = b[state.key];
    var missing = (x === null || x === undefined) - (y === null || y === undefined);
    if (missing) return missing; // rows without the value last, either way
    var order = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y));
    return (state.asc ? order : -order) || a.i - b.i;
  }

  function render() {
    var fragment = document.createDocumentFragment();
    state.view.slice(0, state.limit).forEach(function (r) { fragment.appendChild(rowElement(r)); });
    body.textContent = "";
    body.appendChild(fragment);
    var count = Math.min(state.limit, state.view.length);
    shown.textContent = "showing " + count + " of " + state.view.length + " rows" +
      (state.view.length !== rows.length ? " (" + rows.length + " in all)" : "");
    more.hidden = count >= state.view.length;
  }

  function update() {
    var query = filter.value.trim().toLowerCase();
    var view = rows.filter(function (r) {
      return (!errorsOnly.checked || r.error) && (!query || searchText(r).indexOf(query) >= 0);
    });
    if (state.key !== null) view.sort(compare);
    state.view = view;
    state.limit = page;
    render();
  }

  Array.prototype.forEach.call(headers, function (th) {
    var key = th.getAttribute("data-key");
    if (!key) return;
    th.classList.add("sortable");
    th.addEventListener("click", function () {
      state.asc = state.key === key ? !state.asc : true;
      state.key = key;
      Array.prototype.forEach.call(headers, function (h) { h.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", state.asc ? "ascending" : "descending");
      update();
    });
  });
  body.addEventListener("click", function (event) {
    var button = event.target.closest("button.toggle");
    if (button) toggle(button);
  });
  errorsOnly.addEventListener("change", update);
  filter.addEventListener("input", update);
  more.addEventListener("click", function () {
    state.limit += page;
    render();
  });
  update();
})();
