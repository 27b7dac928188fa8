// opledger console: hash the key in the browser before the find form is
// sent. The key's input has no name, so the form never sends it; only its
// SHA-256 (hex) goes, as key_sha256, and whether it carries its own birth,
// as key_born (then the servers ignore a first-sent time, and so does the
// console).
"use strict";

// keyBorn reports whether key carries its own birth, by the servers' rule
// (internal/keybirth.Birth): a UUID of version 7 and the RFC 9562 variant
// in its 36-character form whose 48-bit time is not zero.
function keyBorn(key) {
  if (!/^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-7[0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}$/.test(key)) return false;
  return /[1-9a-fA-F]/.test(key.slice(0, 8) + key.slice(9, 13));
}

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
    var born = keyBorn(keyInput.value);
    window.crypto.subtle.digest("SHA-256", bytes).then(function (buf) {
      var hex = Array.prototype.map.call(new Uint8Array(buf), function (b) {
        return b.toString(16).padStart(2, "0");
      }).join("");
      document.getElementById("key_sha256").value = hex;
      document.getElementById("key_born").value = born ? "1" : "";
      keyInput.value = "";
      form.submit();
    });
  });
});
