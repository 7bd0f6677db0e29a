package sparktopicrouter.bench;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.LinkedBlockingQueue;
import org.HdrHistogram.Histogram;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * {@code bench/realtime.py}'s consumer: reads one topic from its start and records, per producer step, each timed
 * record's latency (receive time minus the intended send time in its schedule header) in an HDR histogram.
 *
 * <p>Why Java: at the router's rates the consumer reads ~60,000 records a second on the same two cores as the
 * broker and Spark, and a Python consumer (confluent-kafka, a Python object per record) took more than half a core
 * of them, which Spark then lacked. This one costs a few microseconds of a record; the measurement is unchanged.
 *
 * <p>Protocol, all UTF-8 lines: stdin first carries the client configs and the {@code bench.*} keys below as
 * {@code key=value} lines ended by an empty line (so no secret is on the command line); then one command per line.
 * Each command gets one line of JSON on stdout:
 * <pre>
 * counts  {"step": timed records so far, ...}
 * late    the epoch microseconds the first record whose key ends with bench.late.suffix arrived, or null
 * stop    {"step": {"count": n, "first_us": t, "last_us": t, "histogram": base64, "worst_by_tick": {...}}, ...}
 * </pre>
 * after which it exits. {@code worst_by_tick} maps intended time in 100 ms ticks (epoch ms / 100) to the worst
 * latency (us) of a message intended then. Keys: {@code bench.topic}, {@code bench.schedule.header} (its value is
 * {@code step:index:intended_us}), {@code bench.timed.suffix} (absent: every record is timed),
 * {@code bench.late.suffix} and {@code bench.histogram.max.us}.
 */
public final class LatencyConsumer {
    private static final class Step {
        final Histogram histogram;
        long firstUs = Long.MAX_VALUE;
        long lastUs = Long.MIN_VALUE;
        final Map<Long, Long> worstByTick = new HashMap<>();

        Step(long maxUs) {
            histogram = new Histogram(1, maxUs, 3);
        }
    }

    private LatencyConsumer() {
    }

    public static void main(String[] args) throws IOException, InterruptedException {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        Properties config = new Properties();
        for (String line = in.readLine(); line != null && !line.isEmpty(); line = in.readLine()) {
            int equals = line.indexOf('=');
            if (equals < 1) {
                throw new IllegalArgumentException("a config line is not key=value: " + line);
            }
            config.setProperty(line.substring(0, equals), line.substring(equals + 1));
        }
        String topic = take(config, "bench.topic", null);
        String header = take(config, "bench.schedule.header", null);
        String timed = take(config, "bench.timed.suffix", "");
        byte[] timedSuffix = timed.isEmpty() ? null : timed.getBytes(StandardCharsets.UTF_8);
        byte[] lateSuffix = take(config, "bench.late.suffix", null).getBytes(StandardCharsets.UTF_8);
        long maxUs = Long.parseLong(take(config, "bench.histogram.max.us", null));

        // Commands arrive on their own thread, so a poll never waits on stdin.
        LinkedBlockingQueue<String> commands = new LinkedBlockingQueue<>();
        Thread reader = new Thread(() -> {
            try {
                for (String line = in.readLine(); line != null; line = in.readLine()) {
                    commands.add(line.trim());
                }
            } catch (IOException e) {
                // stdin closed under us: treated as a stop below
            }
            commands.add("stop");
        }, "commands");
        reader.setDaemon(true);
        reader.start();

        PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
        Map<Integer, Step> steps = new TreeMap<>();
        long lateUs = -1;
        try (KafkaConsumer<byte[], byte[]> consumer =
                new KafkaConsumer<>(config, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            consumer.subscribe(List.of(topic));
            while (true) {
                String command = commands.poll();
                if (command != null) {
                    if (command.equals("counts")) {
                        StringBuilder json = new StringBuilder("{");
                        for (Map.Entry<Integer, Step> entry : steps.entrySet()) {
                            comma(json).append('"').append(entry.getKey()).append("\":")
                                    .append(entry.getValue().histogram.getTotalCount());
                        }
                        out.println(json.append('}'));
                        continue;
                    }
                    if (command.equals("late")) {
                        out.println(lateUs < 0 ? "null" : Long.toString(lateUs));
                        continue;
                    }
                    break;
                }
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(50));
                if (records.isEmpty()) {
                    continue;
                }
                long nowUs = epochMicros();
                for (ConsumerRecord<byte[], byte[]> record : records) {
                    byte[] key = record.key();
                    if (lateUs < 0 && endsWith(key, lateSuffix)) {
                        lateUs = nowUs;
                    }
                    if (timedSuffix != null && !endsWith(key, timedSuffix)) {
                        continue;
                    }
                    Header stamp = record.headers().lastHeader(header);
                    if (stamp == null) {
                        continue;
                    }
                    String[] parts = new String(stamp.value(), StandardCharsets.US_ASCII).split(":");
                    int index = Integer.parseInt(parts[0]);
                    long intended = Long.parseLong(parts[2]);
                    Step step = steps.computeIfAbsent(index, unused -> new Step(maxUs));
                    long latency = Math.max(1, nowUs - intended);
                    step.histogram.recordValue(Math.min(latency, maxUs));
                    step.firstUs = Math.min(step.firstUs, nowUs);
                    step.lastUs = Math.max(step.lastUs, nowUs);
                    step.worstByTick.merge(intended / 100_000, latency, Math::max);
                }
            }
        }
        out.println(results(steps));
    }

    private static String results(Map<Integer, Step> steps) {
        StringBuilder json = new StringBuilder("{");
        for (Map.Entry<Integer, Step> entry : steps.entrySet()) {
            Step step = entry.getValue();
            ByteBuffer buffer = ByteBuffer.allocate(step.histogram.getNeededByteBufferCapacity());
            int length = step.histogram.encodeIntoCompressedByteBuffer(buffer);
            String encoded = Base64.getEncoder().encodeToString(java.util.Arrays.copyOf(buffer.array(), length));
            comma(json).append('"').append(entry.getKey()).append("\":{\"count\":")
                    .append(step.histogram.getTotalCount()).append(",\"first_us\":").append(step.firstUs)
                    .append(",\"last_us\":").append(step.lastUs).append(",\"histogram\":\"").append(encoded)
                    .append("\",\"worst_by_tick\":{");
            List<String> ticks = new ArrayList<>();
            for (Map.Entry<Long, Long> tick : step.worstByTick.entrySet()) {
                ticks.add("\"" + tick.getKey() + "\":" + tick.getValue());
            }
            json.append(String.join(",", ticks)).append("}}");
        }
        return json.append('}').toString();
    }

    private static String take(Properties config, String key, String fallback) {
        String value = (String) config.remove(key);
        if (value == null && fallback == null) {
            throw new IllegalArgumentException("missing config " + key);
        }
        return value == null ? fallback : value;
    }

    private static StringBuilder comma(StringBuilder json) {
        return json.length() > 1 ? json.append(',') : json;
    }

    private static boolean endsWith(byte[] text, byte[] suffix) {
        if (text == null || text.length < suffix.length) {
            return false;
        }
        int from = text.length - suffix.length;
        for (int i = 0; i < suffix.length; i++) {
            if (text[from + i] != suffix[i]) {
                return false;
            }
        }
        return true;
    }

    private static long epochMicros() {
        java.time.Instant now = java.time.Instant.now();
        return now.getEpochSecond() * 1_000_000L + now.getNano() / 1_000;
    }
}
