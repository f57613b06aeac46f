/*-------------------------------------------------------------------------
 *
 * keys.h
 *	  The longest keys dedup accepts, everywhere a key is taken or kept:
 *	  consumer names, message ids, payload fingerprints, stream names, and
 *	  the number of message ids or offsets in one batch.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DEDUP_KEYS_H
#define DEDUP_KEYS_H

/*
 * Longest consumer name and message id a claim accepts, in bytes.  Both go
 * into one btree entry, which must stay well under the ~2.7kB btree limit;
 * longer ids should be hashed by the caller.
 */
#define DEDUP_MAX_CONSUMER_BYTES	256
#define DEDUP_MAX_MESSAGE_ID_BYTES	1024

/* Longest payload fingerprint a claim accepts: a SHA-512 digest. */
#define DEDUP_MAX_FINGERPRINT_BYTES	64

/*
 * Longest stream name a claim by offset accepts, in bytes: Kafka topic
 * names have at most 249 characters, RabbitMQ stream names 255 bytes.
 * Longer names should be hashed by the caller.
 */
#define DEDUP_MAX_STREAM_BYTES		256

/*
 * Most message ids one dedup_claim_many() call accepts, and most offsets
 * one dedup_claim_offsets() call accepts.
 */
#define DEDUP_MAX_BATCH_KEYS		10000

#endif							/* DEDUP_KEYS_H */
