// One JSON request of a console page's script (charts.js, compare.js, sweeps.js): the session's cookie sent; an
// answer that is not JSON (the login page: the session ended) or an error status becomes an Error whose message
// the page shows. `what` names what was asked for in the fallback message ("The series").
"use strict";
window.lkGetJSON = async function (url, what) {
  const answer = await fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin" });
  const type = answer.headers.get("content-type") || "";
  if (!type.startsWith("application/json")) throw new Error("Your session has ended: reload the page to log in.");
  const body = await answer.json();
  if (!answer.ok) throw new Error(body.message || what + " could not be read (" + answer.status + ").");
  return body;
};
