package dev.fencedjobs.chaos;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

/**
 * A TCP proxy between one service and PostgreSQL that the runner can partition. While partitioned,
 * no byte crosses in either direction and new connections hang, as on a network that drops packets:
 * both ends see silence, not a reset, and only their own timeouts notice. On heal, bytes held in
 * flight are delivered late, on whichever connections neither end has given up on, which is how a
 * partitioned former leader's delayed writes reach the database.
 */
final class TcpProxy implements AutoCloseable {

    private final String name;
    private final int targetPort;
    private final ServerSocket server;
    private final Set<Socket> sockets = ConcurrentHashMap.newKeySet();
    private final Object lock = new Object();
    private volatile boolean partitioned;
    private volatile boolean closed;

    TcpProxy(String name, int targetPort) throws IOException {
        this.name = name;
        this.targetPort = targetPort;
        this.server = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
        Thread acceptor = new Thread(this::accept, "proxy-" + name);
        acceptor.setDaemon(true);
        acceptor.start();
    }

    int port() {
        return server.getLocalPort();
    }

    void partition() {
        partitioned = true;
    }

    void heal() {
        synchronized (lock) {
            partitioned = false;
            lock.notifyAll();
        }
    }

    boolean partitioned() {
        return partitioned;
    }

    private void accept() {
        while (!closed) {
            try {
                Socket client = server.accept();
                client.setTcpNoDelay(true);
                sockets.add(client);
                Thread connector = new Thread(() -> connect(client), "proxy-" + name + "-connect");
                connector.setDaemon(true);
                connector.start();
            } catch (IOException e) {
                if (!closed) {
                    System.err.println("proxy " + name + ": " + e);
                }
            }
        }
    }

    private void connect(Socket client) {
        try {
            awaitHealed();
            Socket upstream = new Socket(InetAddress.getLoopbackAddress(), targetPort);
            upstream.setTcpNoDelay(true);
            sockets.add(upstream);
            pump(client, upstream, "up");
            pump(upstream, client, "down");
        } catch (IOException | InterruptedException e) {
            closeQuietly(client);
        }
    }

    private void pump(Socket from, Socket to, String direction) {
        Thread t = new Thread(() -> {
            byte[] buffer = new byte[64 * 1024];
            try (InputStream in = from.getInputStream(); OutputStream out = to.getOutputStream()) {
                int n;
                while ((n = in.read(buffer)) >= 0) {
                    awaitHealed();
                    out.write(buffer, 0, n);
                    out.flush();
                }
            } catch (IOException | InterruptedException e) {
                // One end went away: the other follows.
            } finally {
                closeQuietly(from);
                closeQuietly(to);
            }
        }, "proxy-" + name + "-" + direction);
        t.setDaemon(true);
        t.start();
    }

    private void awaitHealed() throws InterruptedException {
        synchronized (lock) {
            while (partitioned && !closed) {
                lock.wait(100);
            }
        }
    }

    private void closeQuietly(Socket s) {
        sockets.remove(s);
        try {
            s.close();
        } catch (IOException e) {
            // Already closed.
        }
    }

    @Override
    public void close() {
        closed = true;
        heal();
        try {
            server.close();
        } catch (IOException e) {
            // Already closed.
        }
        sockets.forEach(this::closeQuietly);
    }
}
