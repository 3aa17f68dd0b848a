package dev.fencedjobs.db;

import java.time.OffsetDateTime;

/**
 * A role's lease row as read now.
 *
 * @param live whether {@code expires_at > clock_timestamp()} at the moment of the read
 */
public record LeaseState(String role, String holderId, long token, OffsetDateTime expiresAt, boolean live) {}
