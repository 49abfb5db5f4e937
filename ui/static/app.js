// mcpfleet operator dashboard. Everything works without this script; it adds the live fleet view (the
// event stream GET /v1/mcp/events) and the connection test's report written into the card without a
// reload. Text that came from elsewhere (servers, modules, events) is only ever set with textContent.
(function () {
  'use strict';

  var body = document.body;
  var labels = {};
  try { labels = JSON.parse(body.dataset.statusLabels || '{}'); } catch (e) { labels = {}; }
  var csrfMeta = document.querySelector('meta[name="csrf-token"]');
  var csrf = csrfMeta ? csrfMeta.content : '';

  function el(tag, cls, text) {
    var n = document.createElement(tag);
    if (cls) { n.className = cls; }
    if (text !== undefined) { n.textContent = text; }
    return n;
  }

  function label(status) { return (labels[status] && labels[status].label) || status; }

  // statusBadge mirrors the "status" template: an icon (a shape, hidden from screen readers) and a word.
  function statusBadge(status) {
    var l = labels[status] || { label: status, icon: '?' };
    var s = el('span', 'status status-' + status);
    s.dataset.status = status;
    var icon = el('span', 'status-icon', l.icon);
    icon.setAttribute('aria-hidden', 'true');
    s.appendChild(icon);
    s.appendChild(document.createTextNode(' '));
    s.appendChild(el('span', 'status-text', l.label));
    return s;
  }

  function fmtTime(at) { return String(at).slice(0, 19).replace('T', ' ') + ' UTC'; }

  // Forms that post and reload: one click, one request.
  document.querySelectorAll('form[data-post]').forEach(function (form) {
    form.addEventListener('submit', function (ev) {
      var b = form.querySelector('button[type="submit"]');
      if (b && b.disabled) { ev.preventDefault(); return; }
      if (b) { setTimeout(function () { b.disabled = true; }, 0); }
    });
  });

  // --- connection test: rendered in place (ADR-154 §5) ---

  function renderReport(region, rep) {
    region.replaceChildren();
    var head = el('p', 'report-head ' + (rep.reachable ? 'ok' : 'bad'), rep.head || '');
    head.dataset.reportHead = '';
    region.appendChild(head);
    var dl = el('dl', 'pairs');
    (rep.lines || []).forEach(function (line) {
      dl.appendChild(el('dt', '', line.label));
      dl.appendChild(el('dd', '', line.value));
    });
    region.appendChild(dl);
    if (rep.contact) {
      document.querySelectorAll('[data-contact-line]').forEach(function (n) { n.textContent = rep.contact; });
    }
  }

  document.querySelectorAll('form[data-test-connection]').forEach(function (form) {
    var button = form.querySelector('[data-test-button]');
    var region = document.getElementById('connection-report');
    form.addEventListener('submit', function (ev) {
      ev.preventDefault();
      if (!button || button.disabled || !region) { return; }
      button.disabled = true;
      // Cleared before the request goes out: a server that stopped answering must not leave the last
      // success standing while this test waits for its deadline.
      region.replaceChildren();
      region.setAttribute('aria-busy', 'true');
      fetch(form.action, {
        method: 'POST',
        credentials: 'same-origin',
        headers: { 'Accept': 'application/json', 'X-CSRF-Token': csrf },
        body: new URLSearchParams(new FormData(form))
      }).then(function (resp) {
        return resp.json().catch(function () {
          return { reachable: false, head: 'Connection test refused', lines: [{ label: 'Reason', value: 'HTTP ' + resp.status }] };
        });
      }).then(function (rep) {
        renderReport(region, rep);
      }, function (err) {
        renderReport(region, { reachable: false, head: 'Connection test could not be sent', lines: [{ label: 'Reason', value: String(err && err.message || err) }] });
      }).then(function () {
        region.removeAttribute('aria-busy');
        button.disabled = false; // nothing navigates away from this answer
      });
    });
  });

  // --- live fleet view ---

  var cursor = body.dataset.cursor;
  var stateEl = document.querySelector('[data-live-state]');
  var logEl = document.getElementById('live-log');
  var cardID = body.dataset.serverId;

  function state(text) { if (stateEl) { stateEl.textContent = text; } }

  function describe(e) {
    switch (e.kind) {
      case 'mcp.server.imported': return 'catalogue import ' + e.status;
      case 'mcp.tool.changed': return 'tool ' + e.tool + (e.cause === 'endpoint' ? ' moved with its endpoint' : ' changed') + ', disabled until enabled again';
      case 'mcp.server.configured': return 'configuration ' + e.status + ' by ' + (e.by || 'an unknown key') + ': ' + (e.changes || []).map(function (c) {
        return c.field === 'auth.credential' ? c.field + ' ' + c['new'] : c.field + ' ' + (c.old === null ? 'none' : String(c.old)) + ' → ' + (c['new'] === null ? 'none' : String(c['new']));
      }).join(', ');
      case 'mcp.server.registered': return e.from ? 'registered again (' + label(e.from) + ' → ' + label(e.status) + ')' : 'registered (' + label(e.status) + ')';
      case 'mcp.server.deregistered': return 'deregistered';
    }
    return (e.from ? label(e.from) + ' → ' : '') + label(e.status);
  }

  function bump(status, by) {
    var n = document.querySelector('[data-count="' + status + '"] [data-count-value]');
    if (n) { n.textContent = String(Math.max(0, parseInt(n.textContent, 10) + by)); }
  }

  // A trace id links to the tracing UI when the service has a template (MCPFLEET_TRACE_URL).
  var traceURL = body.dataset.traceTemplate || '';
  function traceLink(id) {
    if (!traceURL || !/^[0-9a-f]{32}$/.test(id || '')) { return null; }
    var a = el('a', 'trace');
    a.href = traceURL.split('{trace_id}').join(id);
    a.target = '_blank';
    a.rel = 'noopener noreferrer';
    a.dataset.traceId = id;
    a.appendChild(el('code', '', id));
    return a;
  }

  // The last heartbeat of the servers on the page, from the stream's heartbeat frames (?watch=).
  function watched() {
    if (cardID) { return [cardID]; }
    var ids = [];
    document.querySelectorAll('tr[data-server-id]').forEach(function (row) {
      if (ids.length < 200) { ids.push(row.dataset.serverId); }
    });
    return ids;
  }
  function heartbeat(e) {
    var text = fmtTime(e.last_heartbeat_at);
    document.querySelectorAll('tr[data-server-id="' + e.server_id + '"] [data-field="last-heartbeat"]').forEach(function (cell) {
      cell.textContent = text;
    });
    if (cardID && cardID === e.server_id) {
      document.querySelectorAll('[data-last-heartbeat]').forEach(function (n) { n.textContent = text; });
    }
  }

  function apply(e) {
    if (logEl) {
      var li = el('li', '', fmtTime(e.at) + ' — ' + e.module_name + ': ' + describe(e));
      var link = traceLink(e.trace_id);
      if (link) { li.appendChild(document.createTextNode(' · trace ')); li.appendChild(link); }
      logEl.insertBefore(li, logEl.firstChild);
      while (logEl.children.length > 20) { logEl.removeChild(logEl.lastChild); }
    }
    if (e.kind === 'mcp.server.imported' || e.kind === 'mcp.tool.changed' || e.kind === 'mcp.server.configured') { return; }
    if (e.from !== e.status) {
      if (e.from) { bump(e.from, -1); } else { bump('total', 1); }
      bump(e.status, 1);
    }
    document.querySelectorAll('tr[data-server-id="' + e.server_id + '"]').forEach(function (row) {
      var cell = row.querySelector('[data-field="status"]');
      if (cell) { cell.replaceChildren(statusBadge(e.status)); }
      row.classList.add('changed');
    });
    if (cardID && cardID === e.server_id) {
      var badge = document.querySelector('[data-card-status]');
      if (badge) { badge.replaceChildren(statusBadge(e.status)); }
      var since = document.querySelector('[data-status-since]');
      if (since) { since.textContent = 'since ' + fmtTime(e.at) + ' (live)'; }
    }
  }

  if (cursor && window.EventSource) {
    var es = null;
    var backoff = 1000;
    var connect = function () {
      var ids = watched();
      es = new EventSource('/v1/mcp/events?last_event_id=' + encodeURIComponent(cursor) +
        (ids.length ? '&watch=' + encodeURIComponent(ids.join(',')) : ''));
      es.onopen = function () {
        backoff = 1000;
        state('Live: on. Changes appear here without reloading.');
      };
      es.onmessage = function (m) {
        if (m.lastEventId) { cursor = m.lastEventId; }
        var e;
        try { e = JSON.parse(m.data); } catch (err) { return; }
        if (cardID && e.server_id !== cardID) { return; }
        apply(e);
      };
      es.addEventListener('heartbeat', function (m) {
        var e;
        try { e = JSON.parse(m.data); } catch (err) { return; }
        heartbeat(e);
      });
      es.addEventListener('reset', function (m) {
        if (m.lastEventId) { cursor = m.lastEventId; }
        state('The live feed could not resume where it left off: reload the page to see the current state.');
      });
      es.onerror = function () {
        if (es.readyState !== EventSource.CLOSED) {
          state('Live: connection lost, reconnecting…');
          return;
        }
        // The browser gave up (the service answered with an error, e.g. while restarting): find out
        // whether the session is still good, then reconnect from the last event seen.
        es.close();
        fetch('/ui/session', { credentials: 'same-origin', headers: { 'Accept': 'application/json' } }).then(function (r) {
          if (r.status === 401) {
            state('Your session ended: reload the page to sign in again.');
            return;
          }
          retry();
        }, retry);
      };
    };
    var retry = function () {
      state('Live: connection lost, retrying in ' + Math.round(backoff / 1000) + ' s…');
      setTimeout(connect, backoff);
      backoff = Math.min(backoff * 2, 30000);
    };
    state('Live: connecting…');
    connect();
  }
}());
