import java.util.HexFormat;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.Schema;

/**
 * An AUTO_PUBLISH producer (Schema.AUTO_PRODUCE_BYTES()): the client asks GET_SCHEMA for
 * the topic's latest schema, creates its producer with it and checks every payload against
 * it before sending. Prints "created TOPIC", "sent TOPIC MESSAGE-ID" for each payload it
 * sent and "refused TOPIC EXCEPTION" for each one the client would not send. Args: service
 * URL, then pairs of topic and comma-separated hex payloads.
 */
public class AutoProduce {
    public static void main(String[] args) throws Exception {
        try (PulsarClient client = PulsarClient.builder().serviceUrl(args[0]).build()) {
            for (int i = 1; i + 1 < args.length; i += 2) {
                String topic = args[i];
                try (Producer<byte[]> producer =
                        client.newProducer(Schema.AUTO_PRODUCE_BYTES()).topic(topic).create()) {
                    System.out.println("created " + topic);
                    for (String hex : args[i + 1].split(",")) {
                        try {
                            MessageId id = producer.send(HexFormat.of().parseHex(hex));
                            System.out.println("sent " + topic + " " + id);
                        } catch (RuntimeException e) { // the client's check: not sent
                            System.out.println("refused " + topic + " " + e.getClass().getSimpleName());
                        }
                    }
                }
            }
        }
    }
}
