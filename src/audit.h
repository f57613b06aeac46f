/*-------------------------------------------------------------------------
 *
 * audit.h
 *	  The audit trail (audit.c): one LOG line per record deleted on purpose
 *	  and per window change.  dedup_quote_literal renders any untrusted
 *	  string (names, ids) as a one-line SQL literal that reads back as the
 *	  original.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DEDUP_AUDIT_H
#define DEDUP_AUDIT_H

#include "datatype/timestamp.h"

extern char *dedup_quote_literal(const char *str);
extern void dedup_audit_forget(text *consumer, text *message_id, bool found);
extern void dedup_audit_forget_since(text *consumer, TimestampTz since,
									 uint64 deleted);
extern void dedup_audit_sweep(text *consumer, TimestampTz cutoff,
							  uint64 deleted);

#endif							/* DEDUP_AUDIT_H */
