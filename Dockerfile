# syntax=docker/dockerfile:1
# Builds every service from this repository with the Maven wrapper, then runs it as a non-root user.
FROM eclipse-temurin:17-jdk AS build
WORKDIR /src
COPY .mvn .mvn
COPY mvnw pom.xml ./
COPY test-support/pom.xml test-support/
COPY db/pom.xml db/
COPY runtime/pom.xml runtime/
COPY dispatcher/pom.xml dispatcher/
COPY relay/pom.xml relay/
COPY consumer/pom.xml consumer/
COPY cli/pom.xml cli/
COPY local/pom.xml local/
COPY benchmarks/pom.xml benchmarks/
COPY . .
RUN ./mvnw -B -q --no-transfer-progress -pl dispatcher,relay,consumer,cli -am package -DskipTests

FROM eclipse-temurin:17-jre
RUN groupadd --system app && useradd --system --gid app --home-dir /app --shell /usr/sbin/nologin app
WORKDIR /app
COPY --from=build /src/dispatcher/target/fenced-jobs-dispatcher.jar /src/relay/target/fenced-jobs-relay.jar \
     /src/consumer/target/fenced-jobs-consumer.jar /src/cli/target/fenced-jobs.jar /app/
USER app
ENV JAVA_TOOL_OPTIONS="-XX:MaxRAMPercentage=75"
# Each compose service picks its jar: dispatcher, relay, consumer, or the CLI (migrate, status, ...).
ENTRYPOINT ["java", "-jar"]
CMD ["/app/fenced-jobs.jar", "--help"]
