package dev.fencedjobs.testing;

import java.io.DataInputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.nio.ByteBuffer;
import java.util.ArrayDeque;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A TCP proxy in front of one Kafka broker that reads the protocol's framing and, on request,
 * makes a broker handle a client's produce requests out of order, which is what a broker does to a
 * fresh producer's first requests when the first one meets a partition that is not ready yet
 * (KAFKA-15591): the first is refused, the second appended.
 *
 * <p>Once {@linkplain #reorderNextProduce() armed}, the proxy holds the next produce request of a
 * connection and forwards the one after it first; a request held {@code holdMillis} without a
 * second one behind it is forwarded as it is. Responses always go back in the client's request
 * order, so the client sees no protocol error, only what the broker decided. The broker must
 * advertise the proxy's port ({@link KafkaProcess#KafkaProcess(int)}), so that every client
 * connection passes through it.
 *
 * <p>It also counts the most produce requests one connection ever had in flight, which is what
 * the relay's ordering rests on.
 */
public final class ProduceReorderingProxy implements AutoCloseable {

    private static final short PRODUCE = 0;

    private final ServerSocket server;
    private final long holdMillis;
    private volatile int targetPort;
    private final Set<Socket> sockets = ConcurrentHashMap.newKeySet();
    private final AtomicInteger armed = new AtomicInteger();
    private final AtomicInteger held = new AtomicInteger();
    private final AtomicInteger reordered = new AtomicInteger();
    private final AtomicInteger maxProducesInFlight = new AtomicInteger();
    private volatile boolean closed;

    public ProduceReorderingProxy(long holdMillis) {
        this.holdMillis = holdMillis;
        try {
            server = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
        } catch (IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
        Thread acceptor = new Thread(this::accept, "reordering-proxy");
        acceptor.setDaemon(true);
        acceptor.start();
    }

    public int port() {
        return server.getLocalPort();
    }

    /** Where connections go; set once the broker behind it listens. */
    public void target(int port) {
        this.targetPort = port;
    }

    /** The next produce request on any connection is held and overtaken by the one after it. */
    public void reorderNextProduce() {
        armed.incrementAndGet();
    }

    /** Produce requests held so far. */
    public int held() {
        return held.get();
    }

    /** Held requests that a later produce request of the same connection overtook. */
    public int reordered() {
        return reordered.get();
    }

    /** The most produce requests that were ever in flight at once on one connection. */
    public int maxProducesInFlight() {
        return maxProducesInFlight.get();
    }

    private void accept() {
        while (!closed) {
            try {
                Socket client = server.accept();
                Socket broker = new Socket(InetAddress.getLoopbackAddress(), targetPort);
                client.setTcpNoDelay(true);
                broker.setTcpNoDelay(true);
                sockets.add(client);
                sockets.add(broker);
                Connection c = new Connection(client, broker);
                start("proxy-requests", c::requests);
                start("proxy-responses", c::responses);
            } catch (IOException e) {
                if (!closed) {
                    sleep(50);
                }
            }
        }
    }

    private static void start(String name, Runnable body) {
        Thread t = new Thread(body, name);
        t.setDaemon(true);
        t.start();
    }

    /** One client connection: request frames in, response frames back in request order. */
    private final class Connection {
        private final Socket client;
        private final Socket broker;
        private final ArrayDeque<Integer> expected = new ArrayDeque<>();
        private final Map<Integer, byte[]> arrived = new HashMap<>();
        private final Set<Integer> produces = new java.util.HashSet<>();

        Connection(Socket client, Socket broker) {
            this.client = client;
            this.broker = broker;
        }

        void requests() {
            try {
                client.setSoTimeout(20);
                DataInputStream in = new DataInputStream(client.getInputStream());
                OutputStream out = broker.getOutputStream();
                byte[] holding = null;
                long holdingSince = 0;
                while (!closed) {
                    byte[] frame;
                    try {
                        frame = readFrame(in);
                    } catch (SocketTimeoutException e) {
                        if (holding != null && System.currentTimeMillis() - holdingSince >= holdMillis) {
                            out.write(holding);
                            holding = null;
                        }
                        continue;
                    }
                    ByteBuffer header = ByteBuffer.wrap(frame, 4, 8);
                    short apiKey = header.getShort();
                    header.getShort();
                    int correlationId = header.getInt();
                    boolean produce = apiKey == PRODUCE;
                    synchronized (this) {
                        expected.add(correlationId);
                        if (produce) {
                            produces.add(correlationId);
                            maxProducesInFlight.accumulateAndGet(produces.size(), Math::max);
                        }
                    }
                    if (produce && holding == null && take(armed)) {
                        held.incrementAndGet();
                        holding = frame;
                        holdingSince = System.currentTimeMillis();
                        continue;
                    }
                    out.write(frame);
                    if (produce && holding != null) {
                        reordered.incrementAndGet();
                        out.write(holding);
                        holding = null;
                    }
                }
            } catch (IOException e) {
                closeQuietly();
            }
        }

        void responses() {
            try {
                DataInputStream in = new DataInputStream(broker.getInputStream());
                OutputStream out = client.getOutputStream();
                while (!closed) {
                    byte[] frame = readFrame(in);
                    int correlationId = ByteBuffer.wrap(frame, 4, 4).getInt();
                    synchronized (this) {
                        arrived.put(correlationId, frame);
                        produces.remove(correlationId);
                        while (!expected.isEmpty() && arrived.containsKey(expected.peek())) {
                            out.write(arrived.remove(expected.poll()));
                        }
                    }
                }
            } catch (IOException e) {
                closeQuietly();
            }
        }

        private void closeQuietly() {
            for (Socket s : new Socket[] {client, broker}) {
                try {
                    s.close();
                } catch (IOException ignored) {
                    // already gone
                }
                sockets.remove(s);
            }
        }
    }

    private static boolean take(AtomicInteger counter) {
        return counter.getAndUpdate(n -> n > 0 ? n - 1 : 0) > 0;
    }

    /** A whole frame: the 4-byte size and what it counts. Throws EOFException when the peer closed. */
    private static byte[] readFrame(DataInputStream in) throws IOException {
        byte[] size = new byte[4];
        int first = in.read(size, 0, 1);
        if (first < 0) {
            throw new EOFException();
        }
        // Once a frame has begun, wait for the rest of it, however slow.
        readFullyIgnoringTimeouts(in, size, 1, 3);
        int length = ByteBuffer.wrap(size).getInt();
        byte[] frame = new byte[4 + length];
        System.arraycopy(size, 0, frame, 0, 4);
        readFullyIgnoringTimeouts(in, frame, 4, length);
        return frame;
    }

    private static void readFullyIgnoringTimeouts(InputStream in, byte[] b, int off, int len) throws IOException {
        int done = 0;
        while (done < len) {
            try {
                int n = in.read(b, off + done, len - done);
                if (n < 0) {
                    throw new EOFException();
                }
                done += n;
            } catch (SocketTimeoutException e) {
                // keep reading: a timeout only serves the hold check between frames
            }
        }
    }

    private static void sleep(long millis) {
        try {
            Thread.sleep(millis);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    @Override
    public void close() {
        closed = true;
        try {
            server.close();
        } catch (IOException ignored) {
            // closing
        }
        for (Socket s : sockets) {
            try {
                s.close();
            } catch (IOException ignored) {
                // closing
            }
        }
    }
}
