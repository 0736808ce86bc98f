package dev.ratelab.client.servlet;

import jakarta.servlet.DispatcherType;
import jakarta.servlet.Filter;
import jakarta.servlet.http.HttpServlet;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.EnumSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

import org.eclipse.jetty.ee10.servlet.FilterHolder;
import org.eclipse.jetty.ee10.servlet.ServletContextHandler;
import org.eclipse.jetty.ee10.servlet.ServletHolder;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;

/**
 * An embedded Jetty serving one filter in front of an app that answers the
 * client's key as text/plain, with the status the request's
 * {@code x-respond-status} header names (default 200); and raw HTTP/1.1
 * requests sent from the local address a case names (127.0.0.x, ::1).
 */
final class HttpFixture implements AutoCloseable {
    record Response(int status, Map<String, String> headers, String body) {}

    private final Server jetty = new Server();
    private final ServerConnector v4;
    private final ServerConnector v6;

    HttpFixture(Filter filter) throws Exception {
        v4 = new ServerConnector(jetty);
        v4.setHost("127.0.0.1");
        v6 = new ServerConnector(jetty);
        v6.setHost("::1");
        jetty.addConnector(v4);
        jetty.addConnector(v6);
        ServletContextHandler context = new ServletContextHandler();
        context.addFilter(new FilterHolder(filter), "/*", EnumSet.of(DispatcherType.REQUEST));
        context.addServlet(new ServletHolder(new HttpServlet() {
            @Override
            protected void service(HttpServletRequest request, HttpServletResponse response) throws IOException {
                String status = request.getHeader("x-respond-status");
                response.setStatus(status == null ? 200 : Integer.parseInt(status));
                response.setContentType("text/plain; charset=utf-8");
                Client client = (Client) request.getAttribute(RateLimitFilter.CLIENT);
                response.getWriter().write(client == null ? "no client" : client.key());
            }
        }), "/*");
        jetty.setHandler(context);
        jetty.start();
    }

    /** One request, from {@code peer}, with the header lines given (name, value), repeats kept. */
    Response send(String method, String path, String peer, List<List<String>> headers) throws IOException {
        boolean v6peer = peer.contains(":");
        InetAddress local = InetAddress.getByName(peer);
        InetSocketAddress target = v6peer
                ? new InetSocketAddress(InetAddress.getByName("::1"), v6.getLocalPort())
                : new InetSocketAddress(InetAddress.getByName("127.0.0.1"), v4.getLocalPort());
        try (Socket socket = new Socket()) {
            socket.bind(new InetSocketAddress(local, 0));
            socket.connect(target, 5000);
            socket.setSoTimeout(30_000);
            StringBuilder head = new StringBuilder(method + " " + path + " HTTP/1.1\r\nHost: localhost\r\n");
            for (List<String> h : headers) {
                head.append(h.get(0)).append(": ").append(h.get(1)).append("\r\n");
            }
            head.append("Connection: close\r\n\r\n");
            OutputStream out = socket.getOutputStream();
            out.write(head.toString().getBytes(StandardCharsets.ISO_8859_1));
            out.flush();
            return parse(socket.getInputStream().readAllBytes());
        }
    }

    private static Response parse(byte[] raw) throws IOException {
        String text = new String(raw, StandardCharsets.ISO_8859_1);
        int end = text.indexOf("\r\n\r\n");
        if (end < 0) {
            throw new IOException("no complete response head: " + text);
        }
        String[] lines = text.substring(0, end).split("\r\n");
        int status = Integer.parseInt(lines[0].split(" ")[1]);
        Map<String, String> headers = new LinkedHashMap<>();
        for (int i = 1; i < lines.length; i++) {
            int colon = lines[i].indexOf(':');
            String name = lines[i].substring(0, colon).trim().toLowerCase(Locale.ROOT);
            String value = lines[i].substring(colon + 1).trim();
            headers.merge(name, value, (a, b) -> a + ", " + b);
        }
        byte[] body = java.util.Arrays.copyOfRange(raw, end + 4, raw.length);
        if ("chunked".equalsIgnoreCase(headers.get("transfer-encoding"))) {
            body = dechunk(body);
        }
        return new Response(status, headers, new String(body, StandardCharsets.UTF_8));
    }

    private static byte[] dechunk(byte[] body) {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        int at = 0;
        while (at < body.length) {
            int lineEnd = at;
            while (lineEnd + 1 < body.length && !(body[lineEnd] == '\r' && body[lineEnd + 1] == '\n')) {
                lineEnd++;
            }
            String size = new String(body, at, lineEnd - at, StandardCharsets.ISO_8859_1).split(";")[0].trim();
            int n = Integer.parseInt(size, 16);
            if (n == 0) {
                break;
            }
            out.write(body, lineEnd + 2, n);
            at = lineEnd + 2 + n + 2;
        }
        return out.toByteArray();
    }

    @Override
    public void close() {
        try {
            jetty.stop();
        } catch (Exception e) {
            throw new IllegalStateException("Jetty did not stop", e);
        }
    }

}
