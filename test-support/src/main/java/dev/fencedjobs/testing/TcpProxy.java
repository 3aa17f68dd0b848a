package dev.fencedjobs.testing;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

/**
 * A TCP proxy between one service and PostgreSQL that a test or the chaos runner can partition or cut: one listening port
 * per server (the primary and its standby), so the service's multi-host URL lists the proxy's ports
 * and finds the primary through them. While partitioned,
 * no byte crosses in either direction and new connections hang, as on a network that drops packets:
 * both ends see silence, not a reset, and only their own timeouts notice. On heal, bytes held in
 * flight are delivered late, on whichever connections neither end has given up on, which is how a
 * partitioned former leader's delayed writes reach the database.
 */
public final class TcpProxy implements AutoCloseable {

    private final String name;
    private final int[] targetPorts;
    private final ServerSocket[] servers;
    private final Set<Socket> sockets = ConcurrentHashMap.newKeySet();
    private final Object lock = new Object();
    private volatile boolean partitioned;
    private volatile boolean closed;

    public TcpProxy(String name, int... targetPorts) throws IOException {
        this.name = name;
        this.targetPorts = targetPorts.clone();
        this.servers = new ServerSocket[targetPorts.length];
        for (int i = 0; i < targetPorts.length; i++) {
            servers[i] = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
            int target = i;
            Thread acceptor = new Thread(() -> accept(target), "proxy-" + name + "-" + i);
            acceptor.setDaemon(true);
            acceptor.start();
        }
    }

    /** The port in front of the {@code i}th server. */
    public int port(int i) {
        return servers[i].getLocalPort();
    }

    /** {@code host:port} of every listening port, comma-separated, for a JDBC URL. */
    public String hosts() {
        StringBuilder b = new StringBuilder();
        for (ServerSocket s : servers) {
            b.append(b.length() == 0 ? "" : ",").append("127.0.0.1:").append(s.getLocalPort());
        }
        return b.toString();
    }

    public void partition() {
        partitioned = true;
    }

    public void heal() {
        synchronized (lock) {
            partitioned = false;
            lock.notifyAll();
        }
    }

    public boolean partitioned() {
        return partitioned;
    }

    /**
     * Cuts every connection through the proxy now, both ends closed, as when a connection is reset:
     * unlike a partition, both ends see it at once. New connections pass as before.
     */
    public void cut() {
        sockets.forEach(this::closeQuietly);
    }

    private void accept(int target) {
        while (!closed) {
            try {
                Socket client = servers[target].accept();
                client.setTcpNoDelay(true);
                sockets.add(client);
                Thread connector = new Thread(() -> connect(client, targetPorts[target]), "proxy-" + name + "-connect");
                connector.setDaemon(true);
                connector.start();
            } catch (IOException e) {
                if (!closed) {
                    System.err.println("proxy " + name + ": " + e);
                }
            }
        }
    }

    private void connect(Socket client, int targetPort) {
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
        Thread t = new Thread(
                () -> {
                    byte[] buffer = new byte[64 * 1024];
                    try (InputStream in = from.getInputStream();
                            OutputStream out = to.getOutputStream()) {
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
                },
                "proxy-" + name + "-" + direction);
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
        for (ServerSocket server : servers) {
            try {
                server.close();
            } catch (IOException e) {
                // Already closed.
            }
        }
        sockets.forEach(this::closeQuietly);
    }
}
