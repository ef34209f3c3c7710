// lowkiq dashboard (no inline script; CSP-safe): htmx request failures in the #flash banner,
// the checked rows of a list, and the questions of the Move and rate-limit actions.
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
  // Move: the question names the worker chosen; none chosen yet, it asks for one instead.
  function moveTarget(form) {
    var target = form.querySelector("[data-move-target]");
    return target ? target.value : "";
  }
  function moveQuestion(form, question) {
    return question.replace("{to}", moveTarget(form));
  }
  function isMove(form, path) {
    if (form.hasAttribute("data-move-form")) return true;
    var button = form.querySelector('button[data-action="checked-move"]');
    return button !== null && button.getAttribute("formaction") === path;
  }
  // A rate-limit change: the question of the button pressed, with the limit typed.
  function rateLimitQuestion(form, submit) {
    var button = submit && submit.submitter;
    var question = (button && button.getAttribute("data-question")) ||
      form.getAttribute("hx-confirm");
    var limit = form.querySelector('input[name="limit"]').value.trim();
    var burst = form.querySelector('input[name="burst"]').value.trim();
    return question.replace("{limit}", limit || "(no limit typed)")
      .replace("{burst}", burst ? " (burst " + burst + ")" : "");
  }
  function ask(event, question) {
    event.preventDefault();
    if (window.confirm(question)) event.detail.issueRequest(true);
  }
  document.addEventListener("htmx:confirm", function (event) {
    var form = event.detail.elt;
    if (!form.hasAttribute) return;
    if (form.hasAttribute("data-rate-limit-form")) {
      ask(event, rateLimitQuestion(form, event.detail.triggeringEvent));
      return;
    }
    if (!form.hasAttribute("data-move-form") && !form.hasAttribute("data-checked-form")) return;
    var count = form.hasAttribute("data-checked-form") ? updateChecked() : 1;
    if (count === 0) {
      event.preventDefault();
      flash("Check at least one job first.");
      return;
    }
    if (isMove(form, event.detail.path) && !moveTarget(form)) {
      event.preventDefault();
      flash("Choose the worker to move the jobs to first.");
      form.querySelector("[data-move-target]").focus();
      return;
    }
    var question = form.getAttribute("data-question") || "Run this on the {n} checked job(s)?";
    form.querySelectorAll("button[formaction]").forEach(function (button) {
      if (button.getAttribute("formaction") === event.detail.path) {
        question = button.getAttribute("data-question") || question;
      }
    });
    ask(event, moveQuestion(form, question.replace("{n}", String(count))));
  });
  document.addEventListener("htmx:afterSettle", updateChecked);
  document.addEventListener("DOMContentLoaded", updateChecked);
})();
