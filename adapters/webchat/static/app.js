// Silas web chat client. Protocol: docs/webchat-protocol.md.
//
// Rules this file keeps:
//   - No innerHTML/insertAdjacentHTML/document.write: every piece of data
//     reaches the page through textContent or a checked attribute, so
//     commands and outputs show literally.
//   - No inline scripts or style attributes, no eval: the page runs under
//     CSP "default-src 'self'".
'use strict';

(function () {
  // ---- limits and timings (see the protocol doc) ----------------------------
  const MAX_TEXT_CHARS = 16000; // Unicode code points per message
  const MAX_FRAME_BYTES = 64 * 1024; // UTF-8 bytes per JSON frame
  const BACKOFF_MIN_MS = 500;
  const BACKOFF_MAX_MS = 10000;
  const CONNECT_TIMEOUT_MS = 10000;
  const STABLE_MS = 5000; // a connection this old resets the backoff
  const TAP_STALE_MS = 15000; // re-enable buttons if an acked tap never produced an update
  const ID_RE = /^[A-Za-z0-9_-]{1,64}$/;

  const OPEN_STATUSES = new Set(['pending', 'confirming']);
  const RISKS = new Set(['low', 'medium', 'high', 'irreversible']);
  const KINDS = new Set(['approval', 'info', 'secure_input']);
  const STYLES = new Set(['primary', 'secondary', 'danger']);
  const STATUS_TEXT = {
    pending: 'Waiting for your decision',
    confirming: 'Confirm to go ahead',
    approved: 'Approved',
    running: 'Running…',
    done: 'Done',
    failed: 'Failed',
    declined: 'Declined',
    expired: 'Expired',
    refused: 'Refused by policy',
    interrupted: 'Interrupted (not re-run)',
  };

  // ---- DOM -------------------------------------------------------------------
  const $ = (id) => document.getElementById(id);
  const ui = {
    conn: $('conn'),
    identity: $('identity'),
    scroller: $('scroller'),
    log: $('log'),
    login: $('login'),
    loginForm: $('login-form'),
    loginSecret: $('login-secret'),
    loginError: $('login-error'),
    composer: $('composer'),
    composerError: $('composer-error'),
    input: $('input'),
    send: $('send'),
  };

  // h builds an element. props: class, text, boolean properties (open,
  // disabled, hidden) and plain attributes; event-handler attributes are
  // refused. Children: nodes or strings (as text), null/false skipped.
  function h(tag, props, ...children) {
    const e = document.createElement(tag);
    if (props) {
      for (const [k, v] of Object.entries(props)) {
        if (v === undefined || v === null || v === false) continue;
        if (/^on/i.test(k)) throw new Error('event attributes are not allowed');
        if (k === 'class') e.className = v;
        else if (k === 'text') e.textContent = String(v);
        else if (k === 'open' || k === 'disabled' || k === 'hidden') e[k] = Boolean(v);
        else e.setAttribute(k, String(v));
      }
    }
    for (const c of children) {
      if (c === undefined || c === null || c === false) continue;
      e.append(typeof c === 'string' ? document.createTextNode(c) : c);
    }
    return e;
  }

  // codeSpans renders a label's `code` spans as <code> (labels say what a
  // choice runs: "Run `uname -a`"), never as markup and never with the
  // backticks shown.
  function codeSpans(label) {
    const parts = String(label).split('`');
    if (parts.length < 3) return [String(label)];
    return parts.map((p, i) => (i % 2 === 1 && i < parts.length - 1) ? h('code', null, p) : p).filter((p) => p !== '');
  }

  // ---- helpers -------------------------------------------------------------
  function newId(prefix) {
    const b = new Uint8Array(12);
    crypto.getRandomValues(b);
    let s = prefix + '-';
    for (const x of b) s += x.toString(16).padStart(2, '0');
    return s;
  }

  function codePoints(s) {
    let n = 0;
    for (const _ of s) n++; // eslint-disable-line no-unused-vars
    return n;
  }

  const encoder = new TextEncoder();
  const utf8Len = (s) => encoder.encode(s).length;

  const str = (v) => (typeof v === 'string' ? v : '');

  function fmtTime(rfc3339) {
    if (!rfc3339) return '';
    const d = new Date(rfc3339);
    if (isNaN(d.getTime())) return '';
    return d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
  }

  // safeURL returns an absolute http(s) URL or '' (never javascript: etc.).
  function safeURL(u) {
    try {
      const url = new URL(String(u), location.href);
      if (url.protocol === 'http:' || url.protocol === 'https:') return url.href;
    } catch (_) { /* fall through */ }
    return '';
  }

  function nearBottom() {
    const s = ui.scroller;
    return s.scrollHeight - s.scrollTop - s.clientHeight < 120;
  }

  function scrollToBottom() {
    ui.scroller.scrollTop = ui.scroller.scrollHeight;
  }

  // append adds a node to the log, keeping the view pinned to the bottom
  // when it already was (or when force is set: the user's own message).
  function append(node, force) {
    // The first-visit hint gives way to the conversation.
    const hint = ui.log.querySelector('[data-testid=hint]');
    if (hint && !(node.dataset && node.dataset.testid === 'hint')) hint.remove();
    const pin = force || nearBottom();
    ui.log.append(node);
    if (pin) scrollToBottom();
  }

  function notice(text, kind) {
    append(h('div', { class: 'notice' + (kind ? ' notice-' + kind : ''), 'data-testid': 'notice', role: 'status' }, text));
  }

  // ---- state ---------------------------------------------------------------
  const state = {
    ws: null,
    ready: false, // hello received on state.ws
    attempt: 0, // reconnect attempts since the last connection that lasted
    helloAt: 0, // when the current connection's hello arrived
    timer: 0, // pending reconnect
    signedOut: false, // login form shown; do not reconnect
    identity: '',
    // Frames not yet acknowledged, in send order: id -> {frame, kind, ...}.
    // Re-sent with the same id after every (re)connect.
    outbox: new Map(),
    // Bot messages: message_id -> {el, text, card, at}.
    messages: new Map(),
    // card_id -> message_id, to find the card a tap belongs to.
    cardMsg: new Map(),
    // card_id -> {id, acked, timer}: a tap in flight; its buttons stay disabled.
    taps: new Map(),
    // card_id -> why the last tap on it was refused; shown on the card
    // (across re-renders) until the next tap.
    cardErrors: new Map(),
    // User messages replayed from the server's history: message_id -> el.
    userMessages: new Map(),
  };

  // ---- connection state ------------------------------------------------------
  function setConn(s, detail) {
    ui.conn.textContent = s;
    ui.conn.dataset.state = s;
    if (detail) ui.conn.title = detail;
    else ui.conn.removeAttribute('title');
  }

  // ---- login -----------------------------------------------------------------
  // takeLoginSecret reads "#login=<secret>" from the address and removes
  // the fragment at once, before anything else can see or keep it.
  function takeLoginSecret() {
    const hash = location.hash;
    if (!hash) return '';
    const m = /(?:^#|&)login=([^&]*)/.exec(hash);
    history.replaceState(history.state, '', location.pathname + location.search);
    if (!m) return '';
    try {
      return decodeURIComponent(m[1]);
    } catch (_) {
      return m[1];
    }
  }

  // extractSecret accepts a bare secret or a pasted address containing
  // "#login=<secret>".
  function extractSecret(s) {
    s = s.trim();
    const m = /#(?:.*&)?login=([^&\s]*)/.exec(s);
    if (m) {
      try {
        return decodeURIComponent(m[1]);
      } catch (_) {
        return m[1];
      }
    }
    return s;
  }

  async function login(secret) {
    let r;
    try {
      r = await fetch('/login', {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ secret }),
        credentials: 'same-origin',
        cache: 'no-store',
      });
    } catch (_) {
      return { ok: false, error: 'Cannot reach the gateway.' };
    }
    if (r.ok) return { ok: true };
    let error = 'Sign-in failed (HTTP ' + r.status + ').';
    try {
      const j = await r.json();
      if (j && typeof j.error === 'string' && j.error) error = j.error;
    } catch (_) { /* keep the generic message */ }
    return { ok: false, error };
  }

  // checkSession: 'ok' (200), 'unauthorized' (401) or 'unknown' (anything else).
  async function checkSession() {
    try {
      const r = await fetch('/session', { credentials: 'same-origin', cache: 'no-store' });
      if (r.status === 401) return { status: 'unauthorized' };
      if (!r.ok) return { status: 'unknown' };
      let identity = '';
      try {
        const j = await r.json();
        identity = str(j && j.identity);
      } catch (_) { /* identity is cosmetic */ }
      return { status: 'ok', identity };
    } catch (_) {
      return { status: 'unknown' };
    }
  }

  function showLogin(error) {
    state.signedOut = true;
    clearTimeout(state.timer);
    state.timer = 0;
    if (state.ws) {
      const ws = state.ws;
      state.ws = null;
      state.ready = false;
      ws.close(1000, 'signed out');
    }
    setConn('disconnected');
    ui.login.hidden = false;
    ui.composer.hidden = true;
    ui.loginError.textContent = error || '';
    ui.loginSecret.value = '';
    ui.loginSecret.focus();
  }

  function hideLogin() {
    state.signedOut = false;
    ui.login.hidden = true;
    ui.composer.hidden = false;
    ui.loginError.textContent = '';
  }

  ui.loginForm.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const secret = extractSecret(ui.loginSecret.value);
    if (!secret) {
      ui.loginError.textContent = 'Paste the login secret first.';
      return;
    }
    ui.loginError.textContent = '';
    const submit = ui.loginForm.querySelector('button[type=submit]');
    submit.disabled = true;
    const res = await login(secret);
    submit.disabled = false;
    if (!res.ok) {
      ui.loginError.textContent = res.error;
      return;
    }
    hideLogin();
    state.attempt = 0;
    connect();
    ui.input.focus();
  });

  // ---- WebSocket -------------------------------------------------------------
  function connect() {
    clearTimeout(state.timer);
    state.timer = 0;
    if (state.ws || state.signedOut) return;
    setConn('connecting');
    const url = (location.protocol === 'https:' ? 'wss:' : 'ws:') + '//' + location.host + '/ws';
    let ws;
    try {
      ws = new WebSocket(url);
    } catch (_) {
      scheduleReconnect();
      return;
    }
    state.ws = ws;
    state.ready = false;
    const openTimer = setTimeout(() => {
      if (state.ws === ws && ws.readyState === WebSocket.CONNECTING) ws.close();
    }, CONNECT_TIMEOUT_MS);
    ws.addEventListener('open', () => clearTimeout(openTimer));
    ws.addEventListener('message', (ev) => {
      if (state.ws === ws) onFrame(ev.data);
    });
    ws.addEventListener('close', () => {
      clearTimeout(openTimer);
      onClose(ws);
    });
  }

  async function onClose(ws) {
    if (state.ws !== ws) return; // a connection we already abandoned
    state.ws = null;
    state.ready = false;
    // Back off from scratch only after a connection that stayed up for a
    // while, so a server that accepts and then drops us is not hammered.
    if (state.helloAt && Date.now() - state.helloAt > STABLE_MS) state.attempt = 0;
    state.helloAt = 0;
    setConn('disconnected');
    if (state.signedOut) return;
    // Browsers hide the handshake status, so ask whether the session is
    // still good: 401 means sign in again, anything else means retry.
    const s = await checkSession();
    if (state.signedOut || state.ws) return;
    if (s.status === 'unauthorized') {
      showLogin('Your session has ended. Paste a new login secret to continue.');
      return;
    }
    scheduleReconnect();
  }

  function scheduleReconnect() {
    clearTimeout(state.timer);
    const base = Math.min(BACKOFF_MAX_MS, BACKOFF_MIN_MS * Math.pow(2, state.attempt));
    const delay = Math.round(base / 2 + Math.random() * (base / 2));
    state.attempt++;
    setConn('disconnected', 'reconnecting in ' + Math.ceil(delay / 1000) + ' s');
    state.timer = setTimeout(connect, delay);
  }

  // reconnectNow skips the backoff wait (network came back, tab shown).
  function reconnectNow() {
    if (state.timer && !state.ws && !state.signedOut) connect();
  }
  window.addEventListener('online', reconnectNow);
  document.addEventListener('visibilitychange', () => {
    if (document.visibilityState === 'visible') reconnectNow();
  });

  function transmit(entry) {
    const ws = state.ws;
    if (!ws || !state.ready || ws.readyState !== WebSocket.OPEN) return false;
    ws.send(JSON.stringify(entry.frame));
    return true;
  }

  function flushOutbox() {
    for (const entry of state.outbox.values()) transmit(entry);
  }

  // ---- incoming frames -------------------------------------------------------
  function onFrame(data) {
    if (typeof data !== 'string') return;
    let f;
    try {
      f = JSON.parse(data);
    } catch (_) {
      notice('The gateway sent a frame that is not JSON; ignored.', 'error');
      return;
    }
    if (!f || typeof f !== 'object') return;
    switch (f.type) {
      case 'hello':
        onHello(f);
        break;
      case 'ack':
        onAck(f);
        break;
      case 'message':
        onMessage(f);
        break;
      case 'update':
      case 'card_state': // the answer to get_card
        onUpdate(f);
        break;
      case 'tap_result':
        onTapResult(f);
        break;
      case 'error':
        onError(f);
        break;
      default:
        // Unknown frame types are ignored so the server can add new ones.
        break;
    }
  }

  function onHello(f) {
    state.ready = true;
    state.helloAt = Date.now();
    state.identity = str(f.identity);
    ui.identity.textContent = state.identity;
    setConn('connected');
    // Unacknowledged frames go again with their original ids; the server
    // answers a repeat with duplicate:true instead of acting twice.
    flushOutbox();
    // A first visit: say what to type. The replay, if any, replaces it.
    if (!document.querySelector('[data-testid=message], [data-testid=card], [data-testid=hint]')) {
      append(h('div', { class: 'notice', 'data-testid': 'hint', role: 'status' }, 'Try /run uname -a, or /help for what Silas can do.'));
    }
  }

  function onAck(f) {
    const id = str(f.id);
    const entry = state.outbox.get(id);
    if (!entry) return;
    state.outbox.delete(id);
    if (entry.kind === 'message') {
      setUserState(entry.el, 'sent');
    } else if (entry.kind === 'tap') {
      const tap = state.taps.get(entry.cardId);
      if (tap && tap.id === id) {
        tap.acked = true;
        tap.timer = setTimeout(() => {
          // Nothing came back: ask for the card's current state (an
          // update missed in a reconnect) and let the buttons work again.
          transmit({ frame: { type: 'get_card', id: newId('g'), card_id: entry.cardId } });
          releaseTap(entry.cardId, id);
        }, TAP_STALE_MS);
      }
    }
  }

  function onError(f) {
    const code = str(f.code) || 'internal';
    const text = str(f.message) || code;
    const id = str(f.id);
    const entry = id ? state.outbox.get(id) : null;
    if (entry) {
      state.outbox.delete(id);
      if (entry.kind === 'message') {
        setUserState(entry.el, 'failed', text, code === 'internal' ? entry : null);
      } else if (entry.kind === 'tap') {
        tapRefused(entry.cardId, id, text);
      }
      return;
    }
    if (code === 'unauthorized') {
      // The server closes the socket next; onClose checks /session.
      notice('The gateway says this session is not authorised.', 'error');
      return;
    }
    notice('Gateway error: ' + text, 'error');
  }

  // tapRefused shows why a tap changed nothing on its card (or as a notice
  // when the card is not shown) and lets its buttons work again.
  function tapRefused(cardId, tapId, text) {
    state.cardErrors.set(cardId, text);
    if (state.cardMsg.has(cardId)) {
      const tap = state.taps.get(cardId);
      if (tap && tap.id === tapId) releaseTap(cardId, tapId);
      else rerenderCard(cardId);
    } else {
      releaseTap(cardId, tapId, true);
      notice(text, 'error');
    }
  }

  // onTapResult: the core's answer to a tap, matched by the tap's id. Only
  // a refusal needs the page: a tap that took effect is answered by the
  // card's update. Answers to another tab's taps are ignored.
  function onTapResult(f) {
    const id = str(f.id);
    const cardId = str(f.card_id);
    const tap = state.taps.get(cardId);
    if (f.refused && (!tap || tap.id !== id) && ID_RE.test(id) &&
        ui.log.querySelector('[data-testid=user-message][data-client-id="' + id + '"]')) {
      // A typed "approve <id>" from this tab: no button to show it on.
      notice(str(f.message) || 'That was refused: nothing was changed.', 'error');
      return;
    }
    if (!f.refused || !tap || tap.id !== id) return;
    tapRefused(cardId, id, str(f.message) || 'The tap was refused: nothing was changed.');
  }

  function validMessageId(id) {
    return typeof id === 'string' && id.length > 0 && id.length <= 256;
  }

  // onUserMessage shows a user message from the history: it becomes the
  // local echo it came from (same client id) or, after a reload, a new
  // entry; a repeat of one already shown changes nothing.
  function onUserMessage(f) {
    if (state.userMessages.has(f.message_id)) return;
    const cid = str(f.client_id);
    let el = cid && ID_RE.test(cid) ? ui.log.querySelector('[data-testid=user-message][data-client-id="' + cid + '"]') : null;
    if (!el) {
      el = h('div', { class: 'msg user replayed', 'data-testid': 'user-message', 'data-client-id': cid || null, 'data-state': 'sent' },
        h('div', { class: 'bubble' },
          h('p', { class: 'text', 'data-testid': 'text' }, str(f.text)),
          h('span', { class: 'msg-state', 'data-testid': 'msg-state' }, USER_STATE_TEXT.sent)));
      append(el);
    } else if (el.dataset.state === 'pending') {
      // Stored before the connection dropped; its ack follows the re-send.
      setUserState(el, 'sent');
    }
    el.dataset.messageId = f.message_id;
    state.userMessages.set(f.message_id, el);
  }

  function onMessage(f) {
    if (!validMessageId(f.message_id)) return;
    if (f.from === 'user') {
      onUserMessage(f);
      return;
    }
    const existing = state.messages.get(f.message_id);
    const data = { text: str(f.text), card: cardOf(f.card), at: str(f.at) || (existing ? existing.at : '') };
    if (existing) {
      // Replayed (or repeated) message we already show: refresh in place.
      renderBot(f.message_id, data, !!f.replay);
      return;
    }
    const pin = nearBottom();
    const el = h('div', { class: 'msg bot', 'data-testid': 'message', 'data-message-id': f.message_id });
    if (f.replay) el.classList.add('replayed');
    state.messages.set(f.message_id, { el, text: '', card: null, at: '' });
    ui.log.append(el);
    renderBot(f.message_id, data, !!f.replay);
    if (pin) scrollToBottom();
  }

  function onUpdate(f) {
    if (!validMessageId(f.message_id)) return;
    if (!state.messages.has(f.message_id)) {
      // An update for a message we never saw (older than the replay):
      // show it rather than lose an outcome.
      onMessage({ message_id: f.message_id, text: f.text, card: f.card });
      return;
    }
    const prev = state.messages.get(f.message_id);
    renderBot(f.message_id, { text: str(f.text), card: cardOf(f.card), at: prev.at }, false);
  }

  function cardOf(c) {
    if (!c || typeof c !== 'object' || typeof c.id !== 'string' || !c.id) return null;
    return c;
  }

  // ---- rendering bot messages and cards --------------------------------------
  let graphRev = 0; // makes each load of a run's picture a new request
  let replyTo = null; // {messageId, intent}: the next message replies to that card
  function renderBot(messageId, data, replay) {
    const m = state.messages.get(messageId);
    const wasOpen = m.el.querySelector('details.card-details');
    const detailsOpen = wasOpen ? wasOpen.open : null; // keep the user's choice

    if (m.card && (!data.card || m.card.id !== data.card.id)) state.cardMsg.delete(m.card.id);
    m.text = data.text;
    m.card = data.card;
    m.at = data.at;

    if (data.card) {
      state.cardMsg.set(data.card.id, messageId);
      // A fresh (non-replayed) rendering after our tap was stored answers it.
      const tap = state.taps.get(data.card.id);
      if (tap && tap.acked && !replay) releaseTap(data.card.id, tap.id, true);
    }

    const bubble = h('div', { class: 'bubble' });
    if (data.text) bubble.append(h('p', { class: 'text', 'data-testid': 'text' }, data.text));
    if (data.card) {
      const cardEl = renderCard(data.card, detailsOpen);
      const err = state.cardErrors.get(data.card.id);
      if (err) cardEl.append(h('p', { class: 'card-error', 'data-testid': 'card-error', role: 'alert' }, err));
      if (/^(fgate|flow)-[A-Za-z0-9_-]{1,64}$/.test(data.card.id)) {
        // A flow's gate or progress card: a reply to it answers the run's
        // waiting question (the frame's optional reply_to).
        const reply = h('button', { type: 'button', class: 'reply-btn', 'data-testid': 'reply' }, 'Reply');
        reply.addEventListener('click', () => {
          replyTo = { messageId, intent: str(data.card.intent) };
          composerError('Replying to: ' + replyTo.intent);
          ui.input.focus();
        });
        cardEl.append(reply);
      }
      if (/^flow-[A-Za-z0-9_-]{1,64}$/.test(data.card.id)) {
        // A flow run's progress card: the run's graph, each node in its
        // state, drawn by the server; loaded again at every edit of the
        // card, so it follows the run (docs/flows.md).
        graphRev += 1;
        cardEl.append(h('img', { class: 'flow-graph', 'data-testid': 'flow-graph', alt: "The run's graph, each node in its state",
          src: '/flows/' + data.card.id.slice(5) + '.svg?v=' + graphRev }));
      }
      bubble.append(cardEl);
    }
    const t = fmtTime(data.at);
    if (t) bubble.append(h('time', { class: 'at', datetime: data.at }, t));
    m.el.replaceChildren(bubble);
  }

  function rerenderCard(cardId) {
    const mid = state.cardMsg.get(cardId);
    const m = mid && state.messages.get(mid);
    if (m) renderBot(mid, { text: m.text, card: m.card, at: m.at }, true);
  }

  function renderCard(c, detailsOpen) {
    const kind = KINDS.has(c.kind) ? c.kind : 'info';
    const risk = RISKS.has(c.risk) ? c.risk : '';
    const status = str(c.status);
    const statusClass = Object.prototype.hasOwnProperty.call(STATUS_TEXT, status) ? status : 'unknown';
    const open = status === '' || OPEN_STATUSES.has(status);
    const titleId = newId('card-title');

    const card = h('article', {
      class: 'card kind-' + kind + (risk ? ' risk-' + risk : '') + ' status-' + statusClass,
      'data-testid': 'card',
      'data-card-id': c.id,
      'data-status': status,
      'data-kind': kind,
      'data-risk': risk || null,
      'aria-labelledby': titleId,
    });

    const head = h('header', { class: 'card-head' },
      h('h3', { id: titleId, class: 'card-intent', 'data-testid': 'intent' }, str(c.intent)));
    if (risk) {
      head.append(h('span', { class: 'badge risk-' + risk, 'data-testid': 'risk' },
        risk === 'irreversible' ? 'irreversible' : risk + ' risk'));
    }
    card.append(head);

    if (c.rationale) card.append(h('p', { class: 'rationale', 'data-testid': 'rationale' }, str(c.rationale)));

    if (c.command) {
      card.append(h('div', { class: 'field-label' }, 'Command'),
        h('pre', { class: 'command', tabindex: '0' }, h('code', { 'data-testid': 'command' }, str(c.command))));
    }

    if (Array.isArray(c.affected_items) && c.affected_items.length) {
      const ul = h('ul', { class: 'affected', 'data-testid': 'affected', 'aria-label': 'Affected items' });
      for (const it of c.affected_items) ul.append(h('li', null, String(it)));
      card.append(h('div', { class: 'field-label' }, 'Affects'), ul);
    }

    if (c.details) {
      const expand = detailsOpen !== null && detailsOpen !== undefined
        ? detailsOpen
        : risk === 'high' || risk === 'irreversible';
      card.append(h('details', { class: 'card-details', 'data-testid': 'details', open: expand },
        h('summary', null, 'Details'),
        h('div', { class: 'details-body' }, str(c.details))));
    }

    const hasChoices = Array.isArray(c.choices) && c.choices.length > 0;
    if (status && !(status === 'pending' && !hasChoices && kind !== 'approval')) {
      card.append(h('p', { class: 'card-status status-' + statusClass, 'data-testid': 'status' },
        STATUS_TEXT[status] || status));
    }

    if (c.outcome) {
      card.append(h('p', { class: 'outcome status-' + statusClass, 'data-testid': 'outcome' }, str(c.outcome)));
    }
    if (c.output) {
      card.append(h('pre', { class: 'output', 'data-testid': 'output', tabindex: '0', 'aria-label': 'Output' }, str(c.output)));
    }
    if (c.output_ref) {
      card.append(h('a', {
        class: 'full-output',
        'data-testid': 'full-output',
        href: '/outputs/' + encodeURIComponent(String(c.output_ref)),
        target: '_blank',
        rel: 'noopener noreferrer',
      }, 'full output'));
    }

    if (open && c.expires_at) {
      const t = fmtTime(c.expires_at);
      if (t) card.append(h('p', { class: 'expires', 'data-testid': 'expires' }, 'Expires at ' + t));
    }

    if (open && hasChoices) {
      const tap = state.taps.get(c.id);
      const group = h('div', { class: 'choices', role: 'group', 'aria-label': 'Choices', 'data-testid': 'choices' });
      for (const ch of c.choices) {
        if (!ch || typeof ch.id !== 'string') continue;
        const style = STYLES.has(ch.style) ? ch.style : 'secondary';
        const b = h('button', {
          type: 'button',
          class: 'btn btn-' + style + ' choice' + (tap && tap.choice === ch.id ? ' chosen' : ''),
          'data-testid': 'choice-' + ch.id,
          'data-choice-id': ch.id,
          disabled: !!tap,
          'aria-busy': tap && tap.choice === ch.id ? 'true' : null,
        }, ...codeSpans(str(ch.label) || ch.id));
        b.addEventListener('click', () => onChoice(c.id, ch.id));
        group.append(b);
      }
      card.append(group);
    }

    if (open && c.link && typeof c.link === 'object') {
      const href = safeURL(c.link.url);
      if (href) {
        card.append(h('a', {
          class: kind === 'secure_input' ? 'btn btn-primary link-button' : 'card-link',
          'data-testid': 'link',
          href,
          target: '_blank',
          rel: 'noopener noreferrer',
        }, str(c.link.label) || 'Open'));
      }
    }
    return card;
  }

  // ---- taps --------------------------------------------------------------------
  function onChoice(cardId, choice) {
    if (state.taps.has(cardId)) return; // one tap in flight per card
    state.cardErrors.delete(cardId);
    const id = newId('t');
    const entry = { kind: 'tap', cardId, frame: { type: 'tap', id, card_id: cardId, choice } };
    state.taps.set(cardId, { id, choice, acked: false, timer: 0 });
    state.outbox.set(id, entry);
    rerenderCard(cardId);
    transmit(entry);
  }

  // releaseTap ends a tap in flight so the card's buttons work again.
  // quiet: the caller re-renders the card itself.
  function releaseTap(cardId, tapId, quiet) {
    const tap = state.taps.get(cardId);
    if (!tap || tap.id !== tapId) return;
    clearTimeout(tap.timer);
    state.taps.delete(cardId);
    if (!quiet) rerenderCard(cardId);
  }

  // ---- sending messages ---------------------------------------------------------
  const USER_STATE_TEXT = { pending: 'sending…', sent: 'sent', failed: 'not sent' };

  function setUserState(el, s, error, retryEntry) {
    el.dataset.state = s;
    const st = el.querySelector('.msg-state');
    st.replaceChildren(USER_STATE_TEXT[s] + (error ? ': ' + error : ''));
    if (retryEntry) {
      const b = h('button', { type: 'button', class: 'btn btn-secondary retry', 'data-testid': 'retry' }, 'Retry');
      b.addEventListener('click', () => {
        state.outbox.set(retryEntry.frame.id, retryEntry);
        setUserState(el, 'pending');
        transmit(retryEntry);
      });
      st.append(' ', b);
    }
  }

  function composerError(text) {
    ui.composerError.textContent = text || '';
  }

  function submit() {
    const text = ui.input.value;
    if (!text.trim()) return;
    const n = codePoints(text);
    if (n > MAX_TEXT_CHARS) {
      composerError('Message too long: ' + n + ' characters, the limit is ' + MAX_TEXT_CHARS + '.');
      return;
    }
    const id = newId('m');
    const frame = { type: 'message', id, text };
    if (replyTo) frame.reply_to = replyTo.messageId;
    if (utf8Len(JSON.stringify(frame)) > MAX_FRAME_BYTES) {
      composerError('Message too large to send (over 64 KiB once encoded).');
      return;
    }
    composerError('');
    const el = h('div', { class: 'msg user', 'data-testid': 'user-message', 'data-client-id': id, 'data-state': 'pending' },
      h('div', { class: 'bubble' },
        h('p', { class: 'text', 'data-testid': 'text' }, text),
        h('span', { class: 'msg-state', 'data-testid': 'msg-state' }, USER_STATE_TEXT.pending)));
    const entry = { kind: 'message', el, frame };
    state.outbox.set(id, entry);
    append(el, true);
    transmit(entry);
    ui.input.value = '';
    replyTo = null;
    autosize();
  }

  ui.composer.addEventListener('submit', (ev) => {
    ev.preventDefault();
    submit();
    ui.input.focus();
  });

  const isSendKey = (ev) => ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing && ev.keyCode !== 229;
  ui.input.addEventListener('keydown', (ev) => {
    if (isSendKey(ev)) {
      ev.preventDefault();
      submit();
    }
  });
  // Some input paths (synthetic key events, a few IMEs) deliver the Enter
  // character as a separate keypress; keep it out of the next message.
  ui.input.addEventListener('keypress', (ev) => {
    if (isSendKey(ev)) ev.preventDefault();
  });

  // autosize grows the textarea with its lines (up to 6) through the rows
  // attribute: no style attributes, as the CSP forbids them.
  function autosize() {
    let lines = 1;
    for (let i = ui.input.value.indexOf('\n'); i !== -1 && lines < 6; i = ui.input.value.indexOf('\n', i + 1)) lines++;
    ui.input.rows = lines;
  }
  ui.input.addEventListener('input', () => {
    autosize();
    if (ui.composerError.textContent && !replyTo) composerError('');
  });

  // ---- start -------------------------------------------------------------------
  // signInWith signs in with a one-time secret from the address. A used or
  // wrong secret leaves an existing session alone. It answers 'new' (signed
  // in with it), 'existing' (the secret failed, the old session is fine) or
  // '' (signed out: the login form is shown).
  async function signInWith(secret) {
    const res = await login(secret);
    if (res.ok) return 'new';
    const s = await checkSession();
    if (s.status !== 'ok') {
      showLogin(res.error);
      return '';
    }
    notice('That login address was not accepted (' + res.error + '), but this browser is already signed in.');
    return 'existing';
  }

  async function start() {
    setConn('connecting');
    const secret = takeLoginSecret();
    if (secret) {
      if (await signInWith(secret)) connect();
      return;
    }
    const s = await checkSession();
    if (s.status === 'unauthorized') {
      showLogin('');
      return;
    }
    connect(); // 'ok', or the gateway is unreachable: connect() retries
  }

  // A login address pasted into this tab when it is already open only
  // changes the fragment: no page load, so start() would never see it.
  window.addEventListener('hashchange', async () => {
    const secret = takeLoginSecret();
    if (!secret || await signInWith(secret) !== 'new') return;
    // Signed in: what said otherwise is stale.
    for (const n of document.querySelectorAll('[data-testid=notice]')) n.remove();
    hideLogin();
    state.attempt = 0;
    // A socket of the old session, if any, gives way to the new one.
    const old = state.ws;
    state.ws = null;
    if (old) old.close(1000, 'new session');
    clearTimeout(state.timer);
    connect();
    ui.input.focus();
  });

  start();
})();
