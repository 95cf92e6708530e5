// Silas secure form: the passkey pages (registration and step-up). The
// options come from the page (a JSON block the server wrote); the
// browser's answer is posted back as JSON with the link token and the
// CSRF token. Nothing here decides anything: the gateway verifies.
"use strict";
(function () {
  const root = document.getElementById("passkey");
  if (!root) return;
  const btn = document.getElementById("go");
  const status = document.getElementById("status");
  const say = (state, text) => { root.dataset.state = state; status.textContent = text; };

  if (!window.PublicKeyCredential || !navigator.credentials || !window.isSecureContext) {
    btn.disabled = true;
    say("unsupported", "This browser cannot use passkeys here (in-app browsers such as Telegram's often cannot). " +
      "Open this link in your system browser (Safari, Chrome, Firefox, Edge).");
    return;
  }

  const b64 = {
    decode(s) {
      s = s.replace(/-/g, "+").replace(/_/g, "/");
      while (s.length % 4) s += "=";
      return Uint8Array.from(atob(s), c => c.charCodeAt(0)).buffer;
    },
    encode(buf) {
      let s = "";
      for (const b of new Uint8Array(buf)) s += String.fromCharCode(b);
      return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
    },
  };
  const opts = JSON.parse(document.getElementById("options").textContent);
  opts.challenge = b64.decode(opts.challenge);
  if (opts.user) opts.user.id = b64.decode(opts.user.id);
  for (const list of [opts.excludeCredentials, opts.allowCredentials]) {
    for (const c of list || []) c.id = b64.decode(c.id);
  }
  const kind = root.dataset.kind;

  async function run() {
    btn.disabled = true;
    say("waiting", "Waiting for your passkey…");
    let cred;
    try {
      cred = kind === "enroll"
        ? await navigator.credentials.create({ publicKey: opts })
        : await navigator.credentials.get({ publicKey: opts });
    } catch (e) {
      btn.disabled = false;
      say("cancelled", "The passkey was not used (" + e.name + "). Nothing was " + (kind === "enroll" ? "registered" : "run") + ". You can try again.");
      return;
    }
    const r = cred.response;
    const response = { clientDataJSON: b64.encode(r.clientDataJSON) };
    if (kind === "enroll") {
      response.attestationObject = b64.encode(r.attestationObject);
      if (r.getTransports) response.transports = r.getTransports();
    } else {
      response.authenticatorData = b64.encode(r.authenticatorData);
      response.signature = b64.encode(r.signature);
      if (r.userHandle) response.userHandle = b64.encode(r.userHandle);
    }
    const credential = {
      id: cred.id, rawId: b64.encode(cred.rawId), type: cred.type, response,
      clientExtensionResults: cred.getClientExtensionResults ? cred.getClientExtensionResults() : {},
    };
    say("sending", "Checking…");
    try {
      const res = await fetch(location.pathname, {
        method: "POST", credentials: "same-origin",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ t: root.dataset.token, csrf: root.dataset.csrf, credential }),
      });
      const body = await res.json();
      say(body.ok ? "done" : "refused", body.message);
    } catch (e) {
      btn.disabled = false;
      say("error", "Could not reach Silas. Try again.");
    }
  }
  btn.addEventListener("click", run);
})();
