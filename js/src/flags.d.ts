/** Set by scripts/build.mjs: true in the ES module (bundlers, Node), false in the <script> bundle,
 * whose build leaves out, dead code, what only Node, the tests or the server need (the checks
 * that keep a server's data clean, which the server makes when a schema is published). */
declare const LDP_FULL: boolean;
