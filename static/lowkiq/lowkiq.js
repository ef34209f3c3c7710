// lowkiq dashboard (no inline script; CSP-safe): htmx request failures in the #flash banner,
// the checked rows of a list, and the Move action's question.
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

  // A list's checked rows: their checkboxes belong to the #checked form (form="checked").
  // "Check all" checks the page; the count is shown, the form's buttons are enabled only
  // with jobs checked, and each asks its question with the count first.
  function checkedBoxes() {
    return document.querySelectorAll('input[name="id"][form="checked"]');
  }
  function updateChecked() {
    var boxes = checkedBoxes();
    var count = 0;
    boxes.forEach(function (box) { if (box.checked) count += 1; });
    var shown = document.querySelector("[data-checked-count]");
    if (shown) shown.textContent = String(count);
    document.querySelectorAll("[data-checked-form] button").forEach(function (button) {
      button.disabled = count === 0;
    });
    var all = document.querySelector("[data-check-all]");
    if (all) {
      all.checked = count > 0 && count === boxes.length;
      all.indeterminate = count > 0 && count < boxes.length;
    }
    return count;
  }
  document.addEventListener("change", function (event) {
    var target = event.target;
    if (!(target instanceof HTMLInputElement)) return;
    if (target.matches("[data-check-all]")) {
      checkedBoxes().forEach(function (box) { box.checked = target.checked; });
    }
    if (target.matches('[data-check-all], input[form="checked"]')) updateChecked();
  });
  // Move: the question names the worker chosen.
  function moveQuestion(form, question) {
    var target = form.querySelector("[data-move-target]");
    return question.replace("{to}", target ? target.value : "");
  }
  document.addEventListener("htmx:confirm", function (event) {
    var form = event.detail.elt;
    if (form.hasAttribute && form.hasAttribute("data-move-form")) {
      event.preventDefault();
      if (window.confirm(moveQuestion(form, form.getAttribute("data-question")))) {
        event.detail.issueRequest(true);
      }
      return;
    }
    if (!form.hasAttribute || !form.hasAttribute("data-checked-form")) return;
    event.preventDefault();
    var count = updateChecked();
    if (count === 0) {
      flash("Check at least one job first.");
      return;
    }
    var question = "Run this on the {n} checked job(s)?";
    form.querySelectorAll("button[formaction]").forEach(function (button) {
      if (button.getAttribute("formaction") === event.detail.path) {
        question = button.getAttribute("data-question") || question;
      }
    });
    if (window.confirm(moveQuestion(form, question.replace("{n}", String(count))))) {
      event.detail.issueRequest(true);
    }
  });
  document.addEventListener("htmx:afterSettle", updateChecked);
  document.addEventListener("DOMContentLoaded", updateChecked);
})();
