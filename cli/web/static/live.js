// Keeps an open page current: every data-refresh seconds it fetches the page again and swaps the
// #live block (numbers and charts). No library; if the server is away, it tries again next time.
(function () {
  "use strict";
  var every = Number(document.body.getAttribute("data-refresh") || 0);
  var live = document.getElementById("live");
  if (!live || !(every > 0)) {
    return;
  }
  function tick() {
    fetch(window.location.href, { cache: "no-store", headers: { Accept: "text/html" } })
      .then(function (res) { return res.ok ? res.text() : null; })
      .then(function (html) {
        if (html === null) { return; }
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("live");
        if (fresh) {
          live.replaceChildren.apply(live, Array.prototype.slice.call(fresh.childNodes));
          live.setAttribute("data-updated", String(Date.now()));
        }
      })
      .catch(function () { /* the next tick tries again */ })
      .then(function () { window.setTimeout(tick, every * 1000); });
  }
  window.setTimeout(tick, every * 1000);
})();
