package dev.fencedjobs.testing;

import java.io.DataInputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.nio.ByteBuffer;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.common.message.ProduceRequestData;
import org.apache.kafka.common.message.ProduceResponseData;
import org.apache.kafka.common.message.ResponseHeaderData;
import org.apache.kafka.common.protocol.ApiKeys;
import org.apache.kafka.common.protocol.ByteBufferAccessor;
import org.apache.kafka.common.protocol.Errors;
import org.apache.kafka.common.requests.RequestHeader;
import org.apache.kafka.common.requests.RequestUtils;

/**
 * A TCP proxy in front of one Kafka broker that reads the protocol's framing and, on request,
 * makes the broker do to a fresh producer what brokers before Kafka 4.5 do when its first produce
 * request meets a partition that is not ready yet (a new topic, a moved leader): the first request
 * is refused with {@code NOT_LEADER_OR_FOLLOWER} and the one behind it is appended (KAFKA-15591).
 *
 * <p>Once {@linkplain #refuseNextProduce() armed}, the proxy holds the next produce request of a
 * connection. If another produce request follows within {@code holdMillis}, that one goes to the
 * broker and the held one is answered with {@code NOT_LEADER_OR_FOLLOWER} for every partition it
 * carries; if none follows, the held one is refused alone. Either way the producer must retry it.
 * Responses always go back in the client's request order, so the client sees no protocol error,
 * only a broker's answers. The broker must advertise the proxy's port
 * ({@link KafkaProcess#KafkaProcess(int)}), so that every client connection passes through it.
 *
 * <p>It also counts the most produce requests one connection ever had in flight, which is what
 * the relay's ordering rests on.
 */
public final class ProduceRefusingProxy implements AutoCloseable {

    private static final short PRODUCE = 0;

    private final ServerSocket server;
    private final long holdMillis;
    private volatile int targetPort;
    private final Set<Socket> sockets = ConcurrentHashMap.newKeySet();
    private final AtomicInteger armed = new AtomicInteger();
    private final AtomicInteger refused = new AtomicInteger();
    private final AtomicInteger overtaken = new AtomicInteger();
    private final AtomicInteger maxProducesInFlight = new AtomicInteger();
    private volatile boolean closed;

    public ProduceRefusingProxy(long holdMillis) {
        this.holdMillis = holdMillis;
        try {
            server = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        Thread acceptor = new Thread(this::accept, "refusing-proxy");
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

    /** The next produce request on any connection is held, then refused (see the class comment). */
    public void refuseNextProduce() {
        armed.incrementAndGet();
    }

    /** Produce requests refused so far. */
    public int refused() {
        return refused.get();
    }

    /** Refused requests that a later produce request of the same connection overtook to the broker. */
    public int overtaken() {
        return overtaken.get();
    }

    /** The most produce requests that were ever in flight at once on one connection. */
    public int maxProducesInFlight() {
        return maxProducesInFlight.get();
    }

    private void accept() {
        while (!closed) {
            Socket client = null;
            try {
                client = server.accept();
                Socket broker = new Socket(InetAddress.getLoopbackAddress(), targetPort);
                client.setTcpNoDelay(true);
                broker.setTcpNoDelay(true);
                sockets.add(client);
                sockets.add(broker);
                Connection c = new Connection(client, broker);
                start("proxy-requests", c::requests);
                start("proxy-responses", c::responses);
            } catch (IOException e) {
                // The server socket closed (then the loop ends), or the broker refused one
                // connection: its client sees it closed and connects again.
                if (client != null) {
                    try {
                        client.close();
                    } catch (IOException ignored) {
                        // already gone
                    }
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
        private final Set<Integer> produces = new HashSet<>();

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
                            refuse(holding);
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
                        holding = frame;
                        holdingSince = System.currentTimeMillis();
                        continue;
                    }
                    out.write(frame);
                    if (produce && holding != null) {
                        overtaken.incrementAndGet();
                        refuse(holding);
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
                while (!closed) {
                    byte[] frame = readFrame(in);
                    deliver(ByteBuffer.wrap(frame, 4, 4).getInt(), frame);
                }
            } catch (IOException e) {
                closeQuietly();
            }
        }

        private void refuse(byte[] request) throws IOException {
            refused.incrementAndGet();
            deliver(ByteBuffer.wrap(request, 8, 4).getInt(), refusal(request));
        }

        /** A response, sent once every response the client is owed before it has been sent. */
        private synchronized void deliver(int correlationId, byte[] response) throws IOException {
            arrived.put(correlationId, response);
            produces.remove(correlationId);
            OutputStream out = client.getOutputStream();
            while (!expected.isEmpty() && arrived.containsKey(expected.peek())) {
                out.write(arrived.remove(expected.poll()));
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

    /**
     * The broker's answer to a produce request for partitions it does not lead: every partition
     * {@code NOT_LEADER_OR_FOLLOWER}, in the request's own version.
     */
    static byte[] refusal(byte[] requestFrame) {
        ByteBuffer buffer =
                ByteBuffer.wrap(requestFrame, 4, requestFrame.length - 4).slice();
        RequestHeader header = RequestHeader.parse(buffer);
        short version = header.apiVersion();
        ProduceRequestData request = new ProduceRequestData(new ByteBufferAccessor(buffer), version);
        ProduceResponseData response = new ProduceResponseData();
        for (ProduceRequestData.TopicProduceData topic : request.topicData()) {
            List<ProduceResponseData.PartitionProduceResponse> partitions = new ArrayList<>();
            for (ProduceRequestData.PartitionProduceData p : topic.partitionData()) {
                partitions.add(new ProduceResponseData.PartitionProduceResponse()
                        .setIndex(p.index())
                        .setErrorCode(Errors.NOT_LEADER_OR_FOLLOWER.code())
                        .setBaseOffset(-1));
            }
            response.responses()
                    .add(new ProduceResponseData.TopicProduceResponse()
                            .setName(topic.name())
                            .setTopicId(topic.topicId())
                            .setPartitionResponses(partitions));
        }
        ByteBuffer body = RequestUtils.serialize(
                new ResponseHeaderData().setCorrelationId(header.correlationId()),
                ApiKeys.PRODUCE.responseHeaderVersion(version),
                response,
                version);
        byte[] frame = new byte[4 + body.remaining()];
        ByteBuffer.wrap(frame).putInt(body.remaining()).put(body);
        return frame;
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
