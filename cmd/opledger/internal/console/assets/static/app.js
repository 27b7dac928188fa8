// opledger console: hash the key in the browser before the find form is
// sent. The key's input has no name, so the form never sends it; only its
// SHA-256 (hex) goes, as key_sha256.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  var form = document.getElementById("find-key");
  if (!form) return;
  form.addEventListener("submit", function (ev) {
    ev.preventDefault();
    var keyInput = document.getElementById("key");
    var out = document.getElementById("find-error");
    if (!window.crypto || !window.crypto.subtle) {
      out.textContent = "This page cannot hash the key: the browser offers SubtleCrypto only on https or loopback pages. Use opledger inspect.";
      out.hidden = false;
      return;
    }
    var bytes = new TextEncoder().encode(keyInput.value);
    window.crypto.subtle.digest("SHA-256", bytes).then(function (buf) {
      var hex = Array.prototype.map.call(new Uint8Array(buf), function (b) {
        return b.toString(16).padStart(2, "0");
      }).join("");
      document.getElementById("key_sha256").value = hex;
      keyInput.value = "";
      form.submit();
    });
  });
});
