/*-------------------------------------------------------------------------
 *
 * dedup.h
 *	  Declarations shared by the dedup extension's source files.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DEDUP_H
#define DEDUP_H

/*
 * Longest consumer name and message id a claim accepts, in bytes.  Both go
 * into one btree entry, which must stay well under the ~2.7kB btree limit;
 * longer ids should be hashed by the caller.
 */
#define DEDUP_MAX_CONSUMER_BYTES	256
#define DEDUP_MAX_MESSAGE_ID_BYTES	1024

/* dedup.c */
extern Oid	dedup_extension_schema(bool missing_ok);

#endif							/* DEDUP_H */
