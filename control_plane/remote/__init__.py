"""``acpctl serve --listen``: the control plane as an ACP agent over the network, on one
``/acp`` endpoint that speaks both profiles of ACP's remote transport draft (WebSocket, and
Streamable HTTP: POST plus server-sent event streams). Many connections share one control
plane; several clients may attach to one session; every forwarded update carries its event
position so a client that drops comes back without a gap or a repeat (docs/remote.md)."""
