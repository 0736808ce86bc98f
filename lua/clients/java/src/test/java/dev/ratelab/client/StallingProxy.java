package dev.ratelab.client;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;

/**
 * A TCP proxy in front of a redis-server that can hold Redis's replies:
 * commands still reach Redis and run, their replies wait in the proxy until
 * {@link #release()}. What a stall after a script ran looks like to a client
 * (Redis paused between running a call and writing its reply, a congested
 * link), made deterministic.
 */
final class StallingProxy implements AutoCloseable {
    private final ServerSocket listener;
    private final int target;
    private final List<Socket> sockets = new CopyOnWriteArrayList<>();
    private final Object gate = new Object();
    private boolean holding;
    private volatile boolean closed;
    private long forwardedCommands;

    StallingProxy(int targetPort) throws IOException {
        this.target = targetPort;
        this.listener = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
        Thread accept = new Thread(this::accept, "proxy-accept");
        accept.setDaemon(true);
        accept.start();
    }

    int port() {
        return listener.getLocalPort();
    }

    String url() {
        return "redis://127.0.0.1:" + port();
    }

    /** From now on Redis's replies wait in the proxy. */
    void hold() {
        synchronized (gate) {
            holding = true;
        }
    }

    /** The replies held go out, and the next ones too. */
    void release() {
        synchronized (gate) {
            holding = false;
            gate.notifyAll();
        }
    }

    /** Bytes sent to Redis so far, in chunks (a chunk per write the client made, about a command each). */
    synchronized long forwardedChunks() {
        return forwardedCommands;
    }

    private void accept() {
        while (!closed) {
            try {
                Socket client = listener.accept();
                Socket server = new Socket(InetAddress.getLoopbackAddress(), target);
                client.setTcpNoDelay(true);
                server.setTcpNoDelay(true);
                sockets.add(client);
                sockets.add(server);
                pump(client, server, false);
                pump(server, client, true);
            } catch (IOException e) {
                return;
            }
        }
    }

    private void pump(Socket from, Socket to, boolean replies) {
        Thread t = new Thread(() -> {
            byte[] buffer = new byte[65536];
            try (InputStream in = from.getInputStream(); OutputStream out = to.getOutputStream()) {
                int n;
                while ((n = in.read(buffer)) >= 0) {
                    if (replies) {
                        synchronized (gate) {
                            while (holding && !closed) {
                                gate.wait();
                            }
                        }
                    } else {
                        synchronized (this) {
                            forwardedCommands++;
                        }
                    }
                    out.write(buffer, 0, n);
                    out.flush();
                }
            } catch (IOException | InterruptedException e) {
                // The other side closed.
            } finally {
                close(from);
                close(to);
            }
        }, replies ? "proxy-replies" : "proxy-commands");
        t.setDaemon(true);
        t.start();
    }

    private static void close(Socket s) {
        try {
            s.close();
        } catch (IOException e) {
            // Closed already.
        }
    }

    /** Drops every proxied connection (the client sees them lost). */
    void dropConnections() {
        for (Socket s : sockets) {
            close(s);
        }
        sockets.clear();
    }

    @Override
    public void close() {
        closed = true;
        release();
        try {
            listener.close();
        } catch (IOException e) {
            // Closed already.
        }
        dropConnections();
    }
}
