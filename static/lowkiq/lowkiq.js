// lowkiq dashboard: show htmx request failures in the #flash banner (no inline script; CSP-safe).
(function () {
  "use strict";
  function flash(text) {
    var box = document.getElementById("flash");
    if (!box) return;
    box.textContent = text;
    box.hidden = false;
  }
  function clear() {
    var box = document.getElementById("flash");
    if (box) box.hidden = true;
  }
  document.addEventListener("htmx:responseError", function (event) {
    var xhr = event.detail.xhr;
    var message = xhr.statusText;
    try {
      var page = new DOMParser().parseFromString(xhr.responseText, "text/html");
      var node = page.querySelector(".message");
      if (node) message = node.textContent;
    } catch (e) { /* keep the status text */ }
    flash(xhr.status + ": " + message);
  });
  document.addEventListener("htmx:sendError", function () {
    flash("The dashboard server did not answer; retrying on the next refresh.");
  });
  document.addEventListener("htmx:afterRequest", function (event) {
    if (event.detail.successful) clear();
  });
})();
