"""A stand-in for a listener on the head's dashboard port, run as a process of its own:

    python <folder>/ray/dashboard/dashboard.py --port=0 --backend=PORT

It listens on 127.0.0.1 (the port it prints first), and relays every connection to PORT, a
test's own HTTP server. Copied to `.../ray/dashboard/dashboard.py` and run by this user, it is
what `head.listener` proves to be this user's Ray (its process, its command line); copied
anywhere else, or run as another user, it is a stranger. Standard library only (another user's
Python runs it)."""
import contextlib
import socket
import sys
import threading


def copy(source: socket.socket, target: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            target.sendall(data)
    with contextlib.suppress(OSError):
        target.shutdown(socket.SHUT_WR)


def relay(client: socket.socket, backend: int) -> None:
    with client, contextlib.suppress(OSError), \
            socket.create_connection(("127.0.0.1", backend)) as server:   # the test's, if up
        back = threading.Thread(target=copy, args=(server, client), daemon=True)
        back.start()
        copy(client, server)
        back.join()


def main() -> None:
    options = dict(arg[2:].split("=", 1) for arg in sys.argv[1:] if arg.startswith("--"))
    listener = socket.create_server(("127.0.0.1", int(options.get("port", "0"))))
    print(listener.getsockname()[1], flush=True)
    while True:
        client, _ = listener.accept()
        threading.Thread(target=relay, args=(client, int(options["backend"])),
                         daemon=True).start()


if __name__ == "__main__":
    main()
