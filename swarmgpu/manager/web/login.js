// swarmgpu sign-in: a link /login#token=... carries the token in the fragment, which
// the browser sends to no server (no access log, no Referer). This script runs before
// the page is parsed (login.html loads it without defer): it takes any fragment out of
// the address and the tab's history entry first, whatever else the fragment holds,
// then posts the token it held, as the form does. The browser's own list of visited
// pages may have kept the link already; pasting the token keeps it out of every history.
"use strict";

(() => {
  const hash = location.hash;
  if (!hash) return;
  history.replaceState(null, "", location.pathname);
  let raw = null;
  for (const part of hash.slice(1).split("&")) {
    if (!part.startsWith("token=")) continue;
    if (raw !== null) return; // two tokens: which one was meant is not known
    raw = part.slice("token=".length);
  }
  if (!raw) return;
  let token;
  try {
    token = decodeURIComponent(raw);
  } catch (e) {
    return; // a malformed escape: the form is there to paste the token into
  }
  const post = () => {
    const form = document.getElementById("login");
    form.elements.namedItem("token").value = token;
    form.submit();
  };
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", post, { once: true });
  } else {
    post();
  }
})();
