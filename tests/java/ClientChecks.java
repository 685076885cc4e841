// The official Pulsar Java client against sidecars with TLS, Pulsar's authentication
// providers, permissions, the subscription auth mode, producer access modes and sequence
// ids: many checks in one JVM start (they are slow), one line each on stdout,
//     check <name> ok <what it got>      or     check <name> error <Exception> <message>
// which tests/integration/broker_shim/binary/test_binary_java_auth.py asserts. The
// sidecars, their keys, certificates, tokens, grants and topics are the test's, given in
// the properties file named by the one argument.
import java.io.FileReader;
import java.nio.charset.StandardCharsets;
import java.util.Properties;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.pulsar.client.api.Authentication;
import org.apache.pulsar.client.api.AuthenticationFactory;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.ProducerAccessMode;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;

public class ClientChecks {
    static Properties p = new Properties();

    interface Step {
        String run() throws Exception;
    }

    static String get(String key) {
        String value = p.getProperty(key);
        if (value == null) {
            throw new IllegalArgumentException("no property " + key);
        }
        return value;
    }

    /** Runs one check and prints its line, whatever happens. */
    static void check(String name, Step step) {
        long start = System.nanoTime();
        String line;
        try {
            line = "ok " + step.run();
        } catch (Throwable e) {
            Throwable t = e;
            while ((t instanceof java.util.concurrent.ExecutionException
                    || t instanceof java.util.concurrent.CompletionException)
                    && t.getCause() != null) {
                t = t.getCause();
            }
            String message = String.valueOf(t.getMessage()).replace('\n', ' ');
            line = "error " + t.getClass().getSimpleName() + " " + message;
        }
        System.out.println("check " + name + " " + line);
        System.out.flush();
        System.err.printf("took %s %d ms%n", name, (System.nanoTime() - start) / 1_000_000);
    }

    interface WithClient {
        String run(PulsarClient c) throws Exception;
    }

    /** Runs ``fn`` with a new client, closed after it without waiting: close() waits out
     *  Netty's 2-s quiet period, a client at a time. */
    static String using(String url, Authentication auth, String trust, int timeoutS,
            WithClient fn) throws Exception {
        PulsarClient c = client(url, auth, trust, timeoutS);
        try {
            return fn.run(c);
        } finally {
            c.closeAsync();
        }
    }

    static PulsarClient client(String url, Authentication auth, String trust, int timeoutS)
            throws Exception {
        var builder = PulsarClient.builder().serviceUrl(url)
                .operationTimeout(timeoutS, TimeUnit.SECONDS)
                .connectionTimeout(timeoutS, TimeUnit.SECONDS);
        if (auth != null) {
            builder.authentication(auth);
        }
        if (trust != null) {
            builder.tlsTrustCertsFilePath(trust).enableTlsHostnameVerification(true);
        }
        return builder.build();
    }

    static Authentication token(String key) {
        return AuthenticationFactory.token(get(key));
    }

    /** Subscribes, produces one message, receives it: "<payload>". */
    static String roundTrip(PulsarClient c, String topic, String subscription, String text)
            throws Exception {
        try (Consumer<byte[]> consumer = c.newConsumer().topic(topic).subscriptionName(subscription)
                .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
             Producer<byte[]> producer = c.newProducer().topic(topic).enableBatching(false)
                .sendTimeout(20, TimeUnit.SECONDS).create()) {
            producer.send(text.getBytes(StandardCharsets.UTF_8));
            Message<byte[]> got = consumer.receive(30, TimeUnit.SECONDS);
            if (got == null) {
                return "nothing received";
            }
            consumer.acknowledge(got);
            return new String(got.getData(), StandardCharsets.UTF_8);
        }
    }

    /** Creates a producer (closed again): "created". */
    static String produce(String url, Authentication auth, String trust, String topic)
            throws Exception {
        return using(url, auth, trust, 10, c -> {
            c.newProducer().topic(topic).sendTimeout(10, TimeUnit.SECONDS).create().close();
            return "created";
        });
    }

    static String subscribe(String url, Authentication auth, String topic, String subscription)
            throws Exception {
        return using(url, auth, null, 10, c -> {
            c.newConsumer().topic(topic).subscriptionName(subscription).subscribe().close();
            return "subscribed";
        });
    }

    static Producer<byte[]> producer(PulsarClient c, String topic, String name,
            ProducerAccessMode mode) throws Exception {
        return c.newProducer().topic(topic).producerName(name).accessMode(mode)
                .enableBatching(false).sendTimeout(20, TimeUnit.SECONDS).create();
    }

    public static void main(String[] args) throws Exception {
        try (FileReader in = new FileReader(args[0], StandardCharsets.UTF_8)) {
            p.load(in);
        }
        String plain = get("url");
        String tls = get("url.tls");
        String ca = get("ca");
        // granted: alice, client and guest (produce, consume), carol (consume), dave (produce)
        String topic = get("topic");

        // TLS: the sidecar's certificate, trusted through its CA; another CA's is not
        check("tls-trusted", () -> using(tls, token("token.hs"), ca, 30,
                c -> roundTrip(c, topic + "-tls", "s", "over tls")));
        check("tls-untrusted", () -> using(tls, token("token.hs"), get("ca.other"), 3,
                c -> c.newProducer().topic(topic).create().getProducerName()));
        // a TLS client certificate is the role (its common name, "client")
        check("tls-client-certificate", () -> {
            Authentication cert = AuthenticationFactory.TLS(get("client.cert"), get("client.key"));
            return using(tls, cert, ca, 30,
                    c -> roundTrip(c, topic + "-cert", "s", "by certificate"));
        });

        // the authentication providers, right and wrong credentials
        check("jwt-hs256", () -> using(plain, token("token.hs"), null, 30,
                c -> roundTrip(c, topic + "-hs", "s", "by hs256")));
        check("jwt-hs256-wrong-key", () -> produce(plain, token("token.hs.wrong"), null, topic));
        check("jwt-hs256-expired", () -> produce(plain, token("token.hs.expired"), null, topic));
        check("jwt-rs256", () -> using(get("url.rs"), token("token.rs"), null, 30,
                c -> roundTrip(c, get("topic.rs"), "s", "by rs256")));
        check("jwt-rs256-wrong-key",
                () -> produce(get("url.rs"), token("token.rs.wrong"), null, get("topic.rs")));
        String basic = "{\"userId\":\"alice\",\"password\":\"%s\"}";
        String basicClass = "org.apache.pulsar.client.impl.auth.AuthenticationBasic";
        check("basic", () -> {
            Authentication auth = AuthenticationFactory.create(basicClass,
                    String.format(basic, get("basic.password")));
            return using(plain, auth, null, 30,
                    c -> roundTrip(c, topic + "-basic", "s", "by basic"));
        });
        check("basic-wrong-password", () -> produce(plain, AuthenticationFactory.create(
                basicClass, String.format(basic, "wrong")), null, topic));
        check("anonymous", () -> using(plain, null, null, 30,
                c -> roundTrip(c, topic + "-anonymous", "s", "by guest")));
        check("anonymous-not-granted", () -> produce(plain, null, null, get("topic.prefix")));

        // authorization: no grant, and consume without produce
        check("not-granted-produce", () -> produce(plain, token("token.bob"), null, topic));
        check("not-granted-subscribe", () -> subscribe(plain, token("token.bob"), topic, "s"));
        check("consume-only-subscribe", () -> subscribe(plain, token("token.carol"), topic, "s"));
        check("consume-only-produce", () -> produce(plain, token("token.carol"), null, topic));
        check("produce-only-subscribe", () -> subscribe(plain, token("token.dave"), topic, "s"));
        check("produce-only-produce", () -> produce(plain, token("token.dave"), null, topic));

        // subscriptionAuthMode Prefix: alice's subscriptions must start with "alice"
        String prefixed = get("topic.prefix");
        check("prefix-other-name",
                () -> subscribe(plain, token("token.hs"), prefixed, "billing"));
        check("prefix-own-name",
                () -> subscribe(plain, token("token.hs"), prefixed, "alice-billing"));

        // producer access modes
        PulsarClient c = client(plain, token("token.admin"), null, 30);
        try {
            String modes = get("topic.modes");
            AtomicReference<Producer<byte[]>> first = new AtomicReference<>();
            check("exclusive-first", () -> {
                first.set(producer(c, modes, "ex-1", ProducerAccessMode.Exclusive));
                return first.get().send("from ex-1".getBytes(StandardCharsets.UTF_8)).toString();
            });
            check("exclusive-second", () ->
                    producer(c, modes, "ex-2", ProducerAccessMode.Exclusive).getProducerName());
            check("shared-beside-exclusive", () ->
                    producer(c, modes, "sh-1", ProducerAccessMode.Shared).getProducerName());
            AtomicReference<Producer<byte[]>> fencing = new AtomicReference<>();
            check("exclusive-with-fencing", () -> {
                fencing.set(producer(c, modes, "ex-3", ProducerAccessMode.ExclusiveWithFencing));
                fencing.get().send("from ex-3".getBytes(StandardCharsets.UTF_8));
                return fencing.get().getProducerName();
            });
            // ex-1 was closed; while ex-3 holds the topic it cannot come back
            check("fenced-send", () ->
                    first.get().send("ex-1 again".getBytes(StandardCharsets.UTF_8)).toString());
            if (fencing.get() != null) {
                fencing.get().close();
            }

            // WaitForExclusive: queued while another holds the topic, then it takes over
            String waiting = get("topic.wait");
            check("wait-for-exclusive", () -> {
                Producer<byte[]> holder =
                        producer(c, waiting, "wx-1", ProducerAccessMode.Exclusive);
                CompletableFuture<Producer<byte[]>> queued = c.newProducer().topic(waiting)
                        .producerName("wx-2").accessMode(ProducerAccessMode.WaitForExclusive)
                        .enableBatching(false).createAsync();
                holder.send("from wx-1".getBytes(StandardCharsets.UTF_8));
                Thread.sleep(1000);  // enough to be answered, were it not queued
                boolean pending = !queued.isDone();
                holder.close();
                Producer<byte[]> next = queued.get(30, TimeUnit.SECONDS);
                next.send("from wx-2".getBytes(StandardCharsets.UTF_8));
                next.close();
                return "pending=" + pending;
            });

            // sequence ids with deduplication on: a producer of the same name resumes
            check("sequence-ids", () -> {
                String seq = get("topic.seq");
                Producer<byte[]> a = producer(c, seq, "java-seq", ProducerAccessMode.Shared);
                long fresh = a.getLastSequenceId();
                for (int i = 0; i < 5; i++) {
                    a.newMessage().sequenceId(10 + i)
                            .value(("m" + i).getBytes(StandardCharsets.UTF_8)).send();
                }
                a.close();
                Producer<byte[]> b = producer(c, seq, "java-seq", ProducerAccessMode.Shared);
                long resumed = b.getLastSequenceId();
                b.send("next".getBytes(StandardCharsets.UTF_8));  // numbered after it
                long sent = b.getLastSequenceId();
                b.close();
                Producer<byte[]> d = producer(c, seq, "java-seq", ProducerAccessMode.Shared);
                long again = d.getLastSequenceId();
                d.close();
                Producer<byte[]> other = producer(c, seq, "java-other", ProducerAccessMode.Shared);
                long unknown = other.getLastSequenceId();
                other.close();
                return "fresh=" + fresh + " resumed=" + resumed + " sent=" + sent
                        + " again=" + again + " other=" + unknown;
            });
        } finally {
            c.closeAsync();
        }
        System.exit(0);  // without waiting for the clients' threads to wind down
    }
}
