// swarmgpu sign-in: a link /login#token=... carries the token in the fragment, which
// the browser sends to no server (no access log, no Referer). Take it out of the
// address (and the tab's history) first, then post it as the form does.
"use strict";

(() => {
  const m = /^#token=([^&]+)$/.exec(location.hash);
  if (!m) return;
  history.replaceState(null, "", location.pathname);
  let token;
  try {
    token = decodeURIComponent(m[1]);
  } catch (e) {
    return; // a malformed escape: the form is there to paste the token into
  }
  const form = document.getElementById("login");
  form.elements.namedItem("token").value = token;
  form.submit();
})();
