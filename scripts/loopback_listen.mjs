// A Node preload (`node --import ./scripts/loopback_listen.mjs SERVER.js`): every TCP server the
// process starts listens on 127.0.0.1 only, whatever host it asked for, so a third-party test
// server (the MCP everything server listens on every interface) is reachable from loopback alone.
import net from "node:net";

const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  const [first] = args;
  if (typeof first === "number" || (typeof first === "string" && /^\d+$/.test(first))) {
    const callback = args.find((a) => typeof a === "function");
    return listen.call(this, { port: Number(first), host: "127.0.0.1" }, callback);
  }
  if (first && typeof first === "object" && first.path === undefined) {
    args[0] = { ...first, host: "127.0.0.1" };
  }
  return listen.apply(this, args);
};
