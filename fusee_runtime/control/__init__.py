"""The control surface: what a command, a program or a web hook asks of a home.

One process owns a home at a time (`<home>/LOCK`), and every way in reaches
its engine through the same operations, with the same values and the same
exceptions:

- `ops`: the operations, declared once (`Operations`, and a descriptor of
  each in `OPS`): every face below follows from it.
- `api`: `Control`, the operations on an open engine, in process.
- `wire`: `run_json`/`run_info`, a run as JSON and back, and answers as JSON.
- `protocol`: the socket's wire protocol (JSON lines) and its limits.
- `server`: `ControlServer`, the owner's side of `<home>/control.sock`.
- `client`: `Client`, the same operations from another process over a
  transport; `ControlClient`, over the socket; and the errors of an owner
  that does not answer.
- `connect`: `connect`, the one entry point: ask the home's owner on its
  socket, else open the home yourself.
- `http`, `routes`, `limits`, `openapi`: the operations over HTTP
  (`fusee serve --http`), its limits and its OpenAPI document;
  `connections`: how many HTTP connections, and how long each may take
  to send its request.
- `listening`: listening sockets (the control socket's and HTTP's) that
  run out of descriptors without flooding the log.

The arrows point one way: `connect` imports the engine, and the engine
imports only `server` (which imports `api`, `ops`, `wire` and
`protocol`). So this package imports nothing here: re-exporting `connect`
would make a circle.
"""
